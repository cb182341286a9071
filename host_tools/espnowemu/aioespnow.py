# Emulation of MicroPython's `aioespnow` (docs/library/espnow.rst,
# "Supporting asyncio"): AIOESPNow extends the ESPNow singleton with
# airecv()/arecv()/asend() and `async for`. Polls the radio between asyncio
# steps (1 ms), which is what the board's module does through the stream
# poll of the C object.
try:
    import asyncio
except ImportError:  # pragma: no cover
    import uasyncio as asyncio

import espnow


async def _sleep_ms(ms):
    s = getattr(asyncio, "sleep_ms", None)
    if s is not None:
        await s(ms)
    else:
        await asyncio.sleep(ms / 1000)


class AIOESPNow(espnow.ESPNow):

    async def airecv(self):
        while not self.any():
            await _sleep_ms(1)
        return self.irecv(0)

    async def arecv(self):
        while not self.any():
            await _sleep_ms(1)
        return self.recv(0)

    async def asend(self, mac, msg=None, sync=None):
        if msg is None:
            msg, mac = mac, None
        if sync is None:
            sync = True
        if not sync:
            return self.send(mac, msg, False)
        # the board's asend waits for the radio's answer without blocking the loop
        before = self.stats()
        n = 1 if mac is not None else len([m for m in self._peers if m[0] & 1 == 0])
        self.send(mac, msg, False)
        if mac is not None and mac[0] & 1:
            return True
        while True:
            s = self.stats()
            done = (s[1] - before[1]) + (s[2] - before[2])
            if done >= n:
                return s[2] == before[2]
            await _sleep_ms(1)
            self._poll_now()

    def __aiter__(self):
        return self

    async def __anext__(self):
        return await self.airecv()


def ESPNow():
    return AIOESPNow()
