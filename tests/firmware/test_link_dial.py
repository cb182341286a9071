# snake/runtime/link.py open_tcp: the dial deadline (a connect attempt that
# outlasts it ends in OSError ETIMEDOUT, and its watchdog never cancels the
# dialler afterwards), a refused connect, and a dialler cancelled from outside.
# A listening socket with a full backlog that never accepts is a peer whose
# connect attempts hang (Linux drops the SYNs beyond the backlog).
import asyncio
import socket
import time

from snake.runtime import link


def _bound():
    # a socket bound to a free loopback port (MicroPython's sockets have no
    # getsockname: try ports until one binds)
    base = 20000 + (time.ticks_ms() if hasattr(time, "ticks_ms") else int(time.time() * 1000)) % 20000
    for i in range(200):
        port = 20000 + (base + 97 * i) % 20000
        s = socket.socket()
        try:
            s.bind(socket.getaddrinfo("127.0.0.1", port)[0][-1])
            return s, port
        except OSError:
            s.close()
    raise AssertionError("no free port")


def _hanging_listener():
    s, port = _bound()
    s.listen(0)
    fill = []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(socket.getaddrinfo("127.0.0.1", port)[0][-1])
        except OSError:
            pass
        fill.append(c)
    return s, port, fill


def _close(socks):
    for c in socks:
        c.close()


def _ms():
    return int(time.time() * 1000)


def test_dial_past_the_deadline_is_etimedout_and_the_dialler_lives_on():
    s, port, fill = _hanging_listener()

    async def go():
        t0 = _ms()
        try:
            await link.open_tcp("127.0.0.1", port, link.LINK_REMOTE, 1)
            return "connected", 0, False
        except OSError as e:
            took = _ms() - t0
            err = e.args[0] if e.args else None
        # the watchdog is gone: a later wait in the same task is not cancelled
        await asyncio.sleep(1.3)
        return err, took, True

    try:
        err, took, alive = asyncio.run(go())
    finally:
        _close(fill + [s])
    assert err == 110, err
    assert 800 <= took < 3000, took
    assert alive


def test_refused_dial_is_an_oserror_at_once():
    s, port = _bound()
    s.close()       # nothing listens there now

    async def go():
        t0 = _ms()
        try:
            await link.open_tcp("127.0.0.1", port, link.LINK_REMOTE, 5)
        except OSError as e:
            return (e.args[0] if e.args else None), _ms() - t0
        return None, 0

    err, took = asyncio.run(go())
    assert err == 111, err
    assert took < 2000, took


def test_dialler_cancelled_from_outside_is_cancelled_not_a_timeout():
    s, port, fill = _hanging_listener()
    seen = []

    async def dial():
        try:
            await link.open_tcp("127.0.0.1", port, link.LINK_REMOTE, 5)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        except OSError as e:
            seen.append(e.args[0] if e.args else None)

    async def go():
        t = asyncio.create_task(dial())
        await asyncio.sleep(0.3)
        t.cancel()
        try:
            await t
        except asyncio.CancelledError:
            pass

    try:
        asyncio.run(go())
    finally:
        _close(fill + [s])
    assert seen == ["cancelled"], seen
