# Booting a node: config, board profile, the Node, Wi-Fi, BLE and the console.
#
# Runs once: snake.runtime.node.main() loads this module (platform.cold) for
# the boot and lets go of it once the node runs (node._run), so the running node's heap does not hold
# this code (as .mpy: its bytecode and constants; frozen: function objects).
# The config parser (snake.runtime.config) and the profile loader (snake.profile)
# are dropped as soon as they have been used, before the router is built.
import asyncio
import sys

from snake import platform, crypto
from snake.platform import const
from snake.runtime.node import Node
from snake.runtime.stream import sleep_ms


def _unload(name):
    platform.unload(name)
    import gc
    gc.collect()


def _log_line(msg):
    out = getattr(sys.stdout, "buffer", sys.stdout)
    try:
        out.write(("snakemesh: " + msg + "\n").encode())
        if hasattr(out, "flush"):
            out.flush()
    except (OSError, TypeError):
        pass


def prepare(argv, heap0=None):
    """Config and profile: [cfg, profile, seed, meter] for start(), or an
    exit status (the console has answered with the error until stdin closed)."""
    meter = platform.Meter(heap0) if heap0 is not None else None
    from snake.runtime import config as cfgmod
    from snake.profile import Profile, ProfileError
    if argv is None:
        argv = sys.argv[1:]
    try:
        if platform.BOARD:
            cfg = cfgmod.from_board()
        else:
            cfg = cfgmod.from_argv(argv, argv0=sys.argv[0] if sys.argv else None)
    except cfgmod.ConfigError as e:
        _log_line("error: " + str(e))
        _boot_fail(str(e))
        return 2
    try:
        profile = Profile.load(cfg.profile_path) if cfg.profile_path else Profile()
    except ProfileError as e:
        _log_line("error: " + str(e))
        _boot_fail(str(e))
        return 2
    if cfg.multicast is not None:
        profile.multicast = cfg.multicast
    seed = cfg.take_seed()
    cfg = _settings(cfg)
    # the config parser and the profile loader are not needed after boot:
    # give their memory back (the profile object keeps its class, so the
    # class's loading and checking code goes too; nothing builds a second
    # profile in a booted node)
    if platform.MICROPYTHON:
        Profile.__init__ = Profile.check = Profile.load = None
    cfgmod = None
    Profile = ProfileError = None
    _unload("snake.runtime.config")
    _unload("snake.profile")
    return [cfg, profile, seed, meter]


async def start(args):
    """Build and start everything from prepare()'s list (emptied: the seed
    is not kept); returns (console, meter). The caller runs the console."""
    cfg, profile, seed, meter = args
    del args[:]
    # every module the node runs, loaded now (stream.py: nothing new after boot)
    from snake.runtime.console import Console
    platform.cold("snake.runtime.guard")    # its qstrs now; the code leaves with this call
    if profile.wifi:
        from snake.runtime import wifi
    radio = profile.ble or getattr(cfg, "ble_medium", None)
    if radio:
        try:
            from snake.runtime import ble   # noqa: F401
        except ImportError:
            pass
    now_radio = profile.espnow or getattr(cfg, "espnow_medium", None)
    if now_radio:
        try:
            from snake.runtime import espnow_port   # noqa: F401
        except ImportError:
            pass
    if meter is not None:
        meter.mark("code")
    if radio or now_radio:
        if radio:
            platform.try_import("bluetooth")
        if now_radio:
            platform.try_import("espnow")
        if meter is not None:
            # a board's `bluetooth` and `espnow` are C modules; the host's
            # emulations of them (host_tools/blemu, host_tools/espnowemu) are
            # Python, counted apart from the firmware
            emu = "_blemu_proto" in sys.modules or getattr(sys.modules.get("espnow"), "OP_RX", None)
            meter.mark("radio_emulation" if emu else "code")
    console = Console(None, boot_error=None)
    node = None
    if seed is None:
        console.boot_error = cfg.key_error or "no key"
    else:
        try:
            node = Node(profile, crypto.Signer(seed), cfg, meter)
        except MemoryError:
            console.boot_error = "out of memory building the router (profile %s)" % profile.name
            node = None
        seed = None
    if node is not None:
        console.attach(node)
        node.log_fn = console.log
        node.start()
        if profile.wifi:
            await start_wifi(wifi.Wifi(node, cfg))
            node._mark("wifi")
        if profile.ble or getattr(cfg, "ble_medium", None):
            start_ble(node, console)
            node._mark("ble")
        if now_radio:
            start_espnow(node, cfg)
            node._mark("espnow")
        node._mark("console")
        ts = cfg.telemetry_s if cfg.telemetry_s is not None else profile.telemetry_s
        if ts and cfg.sink != "off":
            node.telesink = asyncio.create_task(node.telemetry_to_sink(cfg.sink, int(ts * 1000)))
        if cfg.app:
            from snake.runtime import app
            asyncio.create_task(app.run_app(node, cfg.app, cfg.app_config))
        if platform.MICROPYTHON:
            _drop_constructors()
    console.boot()
    return console, meter


# Classes a node builds exactly once, all of them built by now (Node builds
# its pools, queues, Router and Prober; Router its Counters, SigCache, Frame,
# Tables, Tree and Snake; the Tree its HopPool; boot.py the Meter, the Wifi
# and the BleManager), and the methods only start() calls (_BOOT_ONLY):
# their code need not stay in the heap for as long as the node runs (as
# .mpy: bytecode and constants, ~3.5 KB; frozen: the function objects).
# Only in a booted node on MicroPython: tests and the simulator build many.
# Building one of these again in this process raises TypeError (the
# constructor is None; deleting it would not do: a class's dict keeps a
# deleted entry's value); nothing does (the console's out-of-memory path
# builds a Console, which keeps its constructor).
_BUILT_ONCE = (("snake.runtime.node", ("Node", "BufPool", "SendQueues")),
               ("snake.router", ("Router",)),
               ("snake.telemetry", ("Counters",)),
               ("snake.crypto", ("SigCache",)),
               ("snake.wire", ("Frame",)),
               ("snake.tables", ("Table", "HopPool")),
               ("snake.tree", ("Tree",)),
               ("snake.snek", ("Snake",)),
               ("snake.runtime.probe", ("Prober",)),
               ("snake.platform", ("Meter",)),
               ("snake.runtime.wifi", ("Wifi",)),
               ("snake.runtime.ble", ("BleManager", "Ring", "Slot")),
               ("snake.runtime.espnow_port", ("EspNowManager",)))


def _drop_constructors():
    for mod, names in _BUILT_ONCE:
        m = sys.modules.get(mod)
        for name in names:
            cls = getattr(m, name, None)
            if cls is not None and "__init__" in cls.__dict__:
                cls.__init__ = None
    for mod, names in _BOOT_ONLY_FUNCTIONS:
        m = sys.modules.get(mod)
        for name in names:
            setattr(m, name, None)
    for mod, name, methods in _BOOT_ONLY:
        cls = getattr(sys.modules.get(mod), name, None)
        if cls is not None:         # (a node without Wi-Fi may not load wifi.py)
            for meth in methods:
                setattr(cls, meth, None)


# methods only the boot above calls (start() and its helpers)
_BOOT_ONLY = (("snake.runtime.node", "Node", ("start", "_mark", "warn")),
              ("snake.runtime.console", "Console", ("attach",)),
              ("snake.runtime.wifi", "Wifi", ("acceptor",)))
# module functions only the boot calls: the node's handshake is encoded
# once (Node)
_BOOT_ONLY_FUNCTIONS = (("snake.wire", ("encode_handshake", "handshake_signed")),)


# ---- Wi-Fi bring-up (snake/runtime/wifi.py runs what this starts) ----------------
_WLAN_TIMEOUT_MS = const(20000)
_RANDOM_PORT_TRIES = const(20)


async def start_wifi(w):
    """Bring up what the config asks for (w: a snake.runtime.wifi.Wifi); each part
    on its own, so a failing one (a busy port, no multicast route) leaves
    the others up. Returns the list of failures (strings, also in
    node.warnings)."""
    from snake.runtime import wifi
    cfg = w.cfg
    node = w.node
    errors = []
    await join_ap(node, cfg)
    prof = node.profile
    host = "0.0.0.0"
    if cfg is not None and cfg.listen is not None:
        host = cfg.listen[0]
        # static listener first: an explicit port must not be taken by a
        # randomly chosen multicast port
        try:
            w.static_port = await _listen(w, cfg.listen[0], cfg.listen[1], wifi.LINK_REMOTE)
            node.listeners["static"] = "%s:%d" % (cfg.listen[0], w.static_port)
        except OSError as e:
            errors.append("cannot listen on %s:%d: %s" % (cfg.listen[0], cfg.listen[1], wifi._err(e)))
    if prof.multicast:
        try:
            w.mc_port = await _listen(w, host, prof.listen_port, wifi.LINK_MULTICAST)
            node.listeners["multicast"] = "%s:%d" % (host, w.mc_port)
            _open_multicast(w)
            w.tasks.append(asyncio.create_task(w._beacon()))
        except OSError as e:
            errors.append("multicast discovery off: %s" % wifi._err(e))
    if cfg is not None:
        for hp in cfg.connect:
            w.tasks.append(asyncio.create_task(w._static(hp[0], hp[1])))
    for e in errors:
        node.warn("wifi: " + e)
    return errors


async def join_ap(node, cfg):
    """Join the configured access point (boards with network.WLAN only)."""
    network = platform.try_import("network")
    if network is None or not hasattr(network, "WLAN") or cfg is None or not cfg.ssid:
        return False
    sta = network.WLAN(network.STA_IF)
    sta.active(True)
    if sta.isconnected():
        return True
    node.log("wifi: joining %s" % cfg.ssid)
    try:
        sta.connect(cfg.ssid, cfg.password or "")
    except OSError as e:
        node.log("wifi: connect failed: %s" % (e,))
        return False
    t0 = platform.ticks_ms()
    while not sta.isconnected():
        if platform.ticks_diff(platform.ticks_ms(), t0) > _WLAN_TIMEOUT_MS:
            node.log("wifi: no connection to %s yet (continuing)" % cfg.ssid)
            return False
        await sleep_ms(200)
    try:
        node.log("wifi: connected, address %s" % sta.ifconfig()[0])
    except (OSError, AttributeError, IndexError):
        pass
    return True


async def _listen(w, host, port, link_type):
    # a TCP listener for links of link_type; returns its port
    cb = w.acceptor(link_type)
    # a listen queue longer than the connections a hostile peer keeps
    # reopening (node.py "Admission"): with a queue of 5, refused sockets
    # that reconnect at once keep it full, and an honest peer's connection
    # waits for the kernel's SYN retries (1, 3, 7 ... s) instead of its turn.
    # The queue is the IP stack's memory, not the MicroPython heap
    bl = 4 * w.node.rx_max
    if port:
        w.servers.append(await asyncio.start_server(cb, host, port, backlog=bl))
        return port
    # a free port: MicroPython sockets have no getsockname(), so pick
    # random ports until one binds
    err = None
    i = 0
    while i < _RANDOM_PORT_TRIES:
        p = 20000 + (int.from_bytes(platform.urandom(2), "big") % 40000)
        try:
            w.servers.append(await asyncio.start_server(cb, host, p, backlog=bl))
            return p
        except OSError as e:
            err = e
        i += 1
    raise err


def _addr(host, port):
    import socket
    return socket.getaddrinfo(host, port)[0][-1]


def _ip_bytes(dotted):
    parts = dotted.split(".")
    if len(parts) != 4:
        raise ValueError("not an IPv4 address: " + dotted)
    return bytes([int(p) for p in parts])


def _open_multicast(w):
    # the discovery socket (w.sock, joined to the group) and our beacon
    import socket
    from snake.runtime.wifi import GROUP, MCAST_PORT
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    except (OSError, AttributeError):
        pass
    reuseport = getattr(socket, "SO_REUSEPORT", None)
    if reuseport is not None:
        try:
            s.setsockopt(socket.SOL_SOCKET, reuseport, 1)
        except OSError:
            pass
    s.bind(_addr("0.0.0.0", MCAST_PORT))
    mreq = _ip_bytes(GROUP) + _ip_bytes("0.0.0.0")
    # MicroPython (unix) has IP_ADD_MEMBERSHIP but no IPPROTO_IP constant
    s.setsockopt(platform.IPPROTO_IP, platform.IP_ADD_MEMBERSHIP, mreq)
    try:
        s.setsockopt(platform.IPPROTO_IP, platform.IP_MULTICAST_LOOP, 1)
    except OSError:
        pass
    s.setblocking(False)
    w.sock = s
    w.group = _addr(GROUP, MCAST_PORT)
    b = w.beacon
    k = w.node.key
    i = 0
    while i < 32:
        b[i] = k[i]
        i += 1
    b[32] = (w.mc_port >> 8) & 0xFF
    b[33] = w.mc_port & 0xFF


# ---- BLE ---------------------------------------------------------------------
def start_ble(node, console):
    """Bluetooth LE links (snake/runtime/ble.py) when this platform has a radio: a
    board's `bluetooth` module, or the host emulation (host_tools/blemu on
    the module path, SNAKEMESH_BLE_MEDIUM set: `snakemesh node --ble-medium`)."""
    if platform.try_import("bluetooth") is None:
        node.warn("ble: no bluetooth module on this platform: BLE off")
        return None
    try:
        from snake.runtime.ble import BleManager
        mgr = BleManager(node.profile, node.key, node.start_link)
        mgr.start()
    except (ImportError, OSError, ValueError, AttributeError) as e:
        node.warn("ble: cannot start: %s" % (e,))
        return None
    node.ble = mgr
    return mgr


# ---- ESP-NOW -----------------------------------------------------------------
def start_espnow(node, cfg):
    """ESP-NOW links (snake/runtime/espnow_port.py) when this platform has the radio:
    a board's `espnow` module, or the host emulation (host_tools/espnowemu
    on the module path, SNAKEMESH_ESPNOW_MEDIUM set: `snakemesh node
    --espnow-medium`). After the Wi-Fi bring-up: on an access point ESP-NOW
    takes its channel."""
    if platform.try_import("espnow") is None:
        node.warn("espnow: no espnow module on this platform: ESP-NOW off")
        return None
    try:
        from snake.runtime.espnow_port import EspNowManager
        mgr = EspNowManager(node.profile, node.key, node.start_link, None, cfg)
        mgr.start()
    except (ImportError, OSError, ValueError, AttributeError) as e:
        node.warn("espnow: cannot start: %s" % (e,))
        return None
    for n in mgr.notes:
        node.warn("espnow: " + n)
    mgr.notes = None
    node.espnow = mgr
    return mgr


def out_of_memory():
    """The heap could not even boot the node: one line, then the console
    answers with the error. Returns the exit status."""
    _log_line("error: out of memory while booting")
    try:
        _boot_fail("out of memory while booting")
    except MemoryError:
        pass    # not even the console fits: the line above says it all
    return 3


class Settings:
    """What the running node keeps of its config (snake.runtime.config is unloaded)."""
    pass


SETTINGS = ("key_error", "listen", "connect", "multicast", "ble_medium", "ssid", "password",
            "hs_timeout_ms", "espnow_medium", "espnow_channel", "espnow_lr", "app", "app_config",
            "sink", "telemetry_s")


def _settings(cfg):
    s = Settings()
    for k in SETTINGS:
        setattr(s, k, getattr(cfg, k))
    return s


def _boot_fail(msg):
    # one parseable line, then keep answering the console with the error
    from snake.runtime.console import Console
    c = Console(None, boot_error=msg)
    c.boot()
    try:
        asyncio.run(c.run())
    except KeyboardInterrupt:
        pass
