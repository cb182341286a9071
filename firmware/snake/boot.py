# Booting a node: config, board profile, the Node, Wi-Fi, BLE and the console.
#
# Runs once: snake.node.main() loads this module for the boot and drops it
# once the node runs (node._run), so the running node's heap does not hold
# this code (as .mpy: its bytecode and constants; frozen: function objects).
# The config parser (snake.config) and the profile loader (snake.profile)
# are dropped as soon as they have been used, before the router is built.
import asyncio
import sys

from snake import platform, crypto
from snake.node import Node, _unload, _sleep_ms


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
    from snake import config as cfgmod
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
    # give their memory back (the profile object keeps its class)
    cfgmod = None
    Profile = ProfileError = None
    _unload("snake.config")
    _unload("snake.profile")
    return [cfg, profile, seed, meter]


async def start(args):
    """Build and start everything from prepare()'s list (emptied: the seed
    is not kept); returns (console, meter). The caller runs the console."""
    cfg, profile, seed, meter = args
    del args[:]
    # every module the node runs, loaded now (stream.py: nothing new after boot)
    from snake.console import Console
    if profile.wifi:
        from snake import wifi
    radio = profile.ble or getattr(cfg, "ble_medium", None)
    if radio:
        try:
            from snake import ble   # noqa: F401
        except ImportError:
            pass
    if meter is not None:
        meter.mark("code")
    if radio:
        platform.try_import("bluetooth")
        if meter is not None:
            # a board's `bluetooth` is a C module; the host's emulation of it
            # (host_tools/blemu) is Python, counted apart from the firmware
            meter.mark("radio_emulation" if "_blemu_proto" in sys.modules else "code")
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
            await wifi.Wifi(node, cfg).start()
            node._mark("wifi")
        if profile.ble or getattr(cfg, "ble_medium", None):
            start_ble(node, console)
            node._mark("ble")
        node._mark("console")
    console.boot()
    return console, meter


def start_ble(node, console):
    """Bluetooth LE links (snake/ble.py) when this platform has a radio: a
    board's `bluetooth` module, or the host emulation (host_tools/blemu on
    the module path, SNAKEMESH_BLE_MEDIUM set: `snakemesh node --ble-medium`)."""
    if platform.try_import("bluetooth") is None:
        node.warn("ble: no bluetooth module on this platform: BLE off")
        return None
    try:
        from snake.ble import BleManager
        mgr = BleManager(node.profile, node.key, node.start_link)
        mgr.start()
    except (ImportError, OSError, ValueError, AttributeError) as e:
        node.warn("ble: cannot start: %s" % (e,))
        return None
    node.ble = mgr
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
    """What the running node keeps of its config (snake.config is unloaded)."""
    pass


SETTINGS = ("key_error", "listen", "connect", "multicast", "ble_medium", "ssid", "password",
            "hs_timeout_ms")


def _settings(cfg):
    s = Settings()
    for k in SETTINGS:
        setattr(s, k, getattr(cfg, k))
    return s


def _boot_fail(msg):
    # one parseable line, then keep answering the console with the error
    from snake.console import Console
    c = Console(None, boot_error=msg)
    c.boot()
    try:
        asyncio.run(c.run())
    except KeyboardInterrupt:
        pass
