# Node configuration: identity key, profile, Wi-Fi credentials, listeners,
# static peers, handshake deadline.
#
# On a board (firmware/main.py with snake.platform.BOARD):
#   /profile.json   board profile (snake.profile)
#   /key.bin        32-byte ed25519 seed (64 hex digits accepted too)
#   /config.json    optional, keys:
#       "wifi": {"ssid": "...", "password": "..."}   access point to join
#       "listen": "HOST:PORT"        static TCP listener (link type remote)
#       "peers": ["HOST:PORT", ...]  static peers to dial (link type remote)
#       "multicast": true|false      override the profile's multicast switch
#       "handshake_timeout": 10      seconds
#       "ble_medium": "ADDR"         emulated BLE medium (host tests only)
#       "espnow_channel": 1..14      ESP-NOW's Wi-Fi channel when not on an
#                                    access point (on one: the AP's channel)
#       "espnow_lr": true|false      ESP-NOW in long-range mode (WLAN.PROTOCOL_LR)
#       "espnow_medium": "ADDR"      emulated ESP-NOW medium (host tests only)
#       "app": "MODULE"              an application to run beside the node:
#                                    its main(mesh, conf) (snake/runtime/app.py)
#       "app_config": {...}          the conf it gets
#       "sink": "KEY"|"auto"|"off"   where telemetry goes over the mesh (a
#                                    gateway's key; auto, the default: the
#                                    tree root when it holds a gateway key)
#       "telemetry_s": 60            seconds between telemetry sends (the
#                                    profile's telemetry_s otherwise; 0: none)
# On the unix port / CPython (argv, then SNAKEMESH_* environment):
#   --key-file PATH        seed file (raw 32 bytes or 64 hex digits)
#   --seed HEX             seed on the command line (visible in `ps`: prefer
#                          the SNAKEMESH_SEED environment variable or a file)
#   --profile PATH         board profile JSON (default boards/UNIX/profile.json
#                          next to firmware/, else built-in defaults)
#   --config PATH          a config.json as above
#   --listen HOST:PORT     static TCP listener
#   --connect HOST:PORT    static peer (repeatable)
#   --no-multicast         no LAN beacons / multicast listener
#   --ble-medium ADDR      emulated BLE medium address
#   --espnow-medium ADDR   emulated ESP-NOW medium address
#   --handshake-timeout S  handshake deadline in seconds (default 10)
#   --app MODULE|FILE.py   an application to run beside the node (as "app")
#   --sink KEY|auto|off    telemetry sink (as "sink")
#   --telemetry S          seconds between telemetry sends (as "telemetry_s")
#   SNAKEMESH_SEED (hex seed), SNAKEMESH_KEY_FILE, SNAKEMESH_PROFILE,
#   SNAKEMESH_HANDSHAKE_TIMEOUT work like the options.
# The seed is never printed; errors name the file, never its content.
import binascii
import json
import os

SEED_LEN = 32
BOARD_PROFILE = "/profile.json"
BOARD_KEY = "/key.bin"
BOARD_CONFIG = "/config.json"


class ConfigError(ValueError):
    pass


def _getenv(name):
    g = getattr(os, "getenv", None)
    if g is None:
        return None
    try:
        return g(name)
    except (TypeError, OSError):
        return None


def parse_hostport(s, what="address"):
    """'HOST:PORT' -> (host, port); ':PORT' / 'PORT' mean 0.0.0.0."""
    if not isinstance(s, str) or not s:
        raise ConfigError("%s: expected HOST:PORT" % what)
    i = s.rfind(":")
    if i < 0:
        host, p = "0.0.0.0", s
    else:
        host, p = s[:i] or "0.0.0.0", s[i + 1:]
    try:
        port = int(p)
    except ValueError:
        raise ConfigError("%s: bad port in %s" % (what, s))
    if port < 1 or port > 65535:
        raise ConfigError("%s: port out of range in %s" % (what, s))
    return host, port


def parse_seed(data, source):
    if len(data) == SEED_LEN:
        return bytes(data)
    text = bytes(data).strip()
    if len(text) == 2 * SEED_LEN:
        try:
            return binascii.unhexlify(text)
        except (ValueError, TypeError):
            pass
    raise ConfigError("%s: expected a 32-byte seed or 64 hex digits (got %d bytes)" % (source, len(data)))


def read_seed_file(path):
    try:
        with open(path, "rb") as f:
            data = f.read(200)
    except OSError:
        raise ConfigError("cannot read key file " + path)
    return parse_seed(data, "key file " + path)


class Config:
    def __init__(self):
        self.seed = None
        self.key_error = None       # why there is no seed
        self.profile_path = None
        self.listen = None          # (host, port) static listener
        self.connect = []           # [(host, port)]
        self.multicast = None       # None: as the profile says
        self.ble_medium = None
        self.espnow_medium = None
        self.espnow_channel = 0     # 0: the interface's (the AP's when on one)
        self.espnow_lr = False
        self.ssid = None
        self.password = None
        self.hs_timeout_ms = 10000
        self.app = None             # application module (snake/runtime/app.py run_app)
        self.app_config = None
        self.sink = None            # 32-byte key, "auto" (None) or "off"
        self.telemetry_s = None     # None: the profile's

    def set_sink(self, v, source):
        if v == "auto":
            self.sink = None
        elif v == "off":
            self.sink = "off"
        else:
            try:
                k = binascii.unhexlify(v) if isinstance(v, str) and len(v) == 64 else None
            except (ValueError, TypeError):
                k = None
            if k is None:
                raise ConfigError(source + ": sink must be a key (64 hex digits), auto or off")
            self.sink = k

    def set_telemetry(self, v, source):
        try:
            s = float(v)
        except (TypeError, ValueError):
            s = -1
        if not 0 <= s <= 86400:
            raise ConfigError(source + ": telemetry_s must be within 0..86400 seconds (0: none)")
        self.telemetry_s = s

    def take_seed(self):
        s = self.seed
        self.seed = None
        return s

    def apply_json(self, d, source="config"):
        if not isinstance(d, dict):
            raise ConfigError(source + ": expected a JSON object")
        for k in d:
            v = d[k]
            if k.startswith("_"):
                continue
            if k == "wifi":
                if not isinstance(v, dict):
                    raise ConfigError(source + ": wifi must be an object with ssid, password")
                self.ssid = v.get("ssid")
                self.password = v.get("password")
            elif k == "listen":
                self.listen = parse_hostport(v, source + " listen")
            elif k == "peers":
                if not isinstance(v, list):
                    raise ConfigError(source + ": peers must be a list of HOST:PORT")
                for p in v:
                    self.connect.append(parse_hostport(p, source + " peers"))
            elif k == "multicast":
                self.multicast = bool(v)
            elif k == "handshake_timeout":
                self.set_hs_timeout(v, source)
            elif k == "ble_medium":
                self.ble_medium = str(v)
            elif k == "espnow_medium":
                self.espnow_medium = str(v)
            elif k == "espnow_channel":
                if not isinstance(v, int) or not 1 <= v <= 14:
                    raise ConfigError(source + ": espnow_channel must be a channel within 1..14")
                self.espnow_channel = v
            elif k == "espnow_lr":
                self.espnow_lr = bool(v)
            elif k == "app":
                if not isinstance(v, str) or not v:
                    raise ConfigError(source + ": app must be a module name")
                self.app = v
            elif k == "app_config":
                if not isinstance(v, dict):
                    raise ConfigError(source + ": app_config must be an object")
                self.app_config = v
            elif k == "sink":
                self.set_sink(v, source)
            elif k == "telemetry_s":
                self.set_telemetry(v, source)
            else:
                raise ConfigError(source + ": unknown key " + k)

    def set_hs_timeout(self, v, source="handshake timeout"):
        try:
            s = float(v)
        except (TypeError, ValueError):
            raise ConfigError(source + ": handshake timeout must be a number of seconds")
        if not (0.1 <= s <= 600):
            raise ConfigError(source + ": handshake timeout must be within 0.1..600 s")
        self.hs_timeout_ms = int(s * 1000)


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError:
        raise ConfigError("cannot read " + path)
    except ValueError:
        raise ConfigError(path + " is not valid JSON")


def _exists(path):
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def from_board():
    c = Config()
    c.profile_path = BOARD_PROFILE if _exists(BOARD_PROFILE) else None
    if _exists(BOARD_CONFIG):
        c.apply_json(load_json(BOARD_CONFIG), BOARD_CONFIG)
    try:
        c.seed = read_seed_file(BOARD_KEY)
    except ConfigError as e:
        c.key_error = "no usable key: %s (provision one: snakemesh provision)" % e
    return c


def default_profile(argv0=None):
    """boards/UNIX/profile.json next to the firmware folder, if present."""
    base = argv0 or ""
    i = base.rfind("/")
    d = base[:i] if i >= 0 else "."
    for cand in (d + "/../boards/UNIX/profile.json", "boards/UNIX/profile.json"):
        if _exists(cand):
            return cand
    return None


USAGE = ("usage: main.py [--key-file PATH | --seed HEX] [--profile PATH] [--config PATH] "
         "[--listen HOST:PORT] [--connect HOST:PORT ...] [--no-multicast] [--ble-medium ADDR] "
         "[--espnow-medium ADDR] "
         "[--handshake-timeout S] [--app MODULE] [--sink KEY|auto|off] [--telemetry S]")


def from_argv(argv, getenv=None, argv0=None):
    """Config from command-line arguments and SNAKEMESH_* variables."""
    if getenv is None:
        getenv = _getenv
    c = Config()
    key_file = getenv("SNAKEMESH_KEY_FILE")
    seed_hex = getenv("SNAKEMESH_SEED")
    c.profile_path = getenv("SNAKEMESH_PROFILE")
    t = getenv("SNAKEMESH_HANDSHAKE_TIMEOUT")
    if t:
        c.set_hs_timeout(t, "SNAKEMESH_HANDSHAKE_TIMEOUT")
    config_path = None
    i = 0
    n = len(argv)

    def val(i):
        if i + 1 >= n:
            raise ConfigError(argv[i] + " needs a value; " + USAGE)
        return argv[i + 1]
    while i < n:
        a = argv[i]
        if a == "--key-file":
            key_file = val(i)
            i += 1
        elif a == "--seed":
            seed_hex = val(i)
            i += 1
        elif a == "--profile":
            c.profile_path = val(i)
            i += 1
        elif a == "--config":
            config_path = val(i)
            i += 1
        elif a == "--listen":
            c.listen = parse_hostport(val(i), "--listen")
            i += 1
        elif a == "--connect":
            c.connect.append(parse_hostport(val(i), "--connect"))
            i += 1
        elif a == "--no-multicast":
            c.multicast = False
        elif a == "--ble-medium":
            c.ble_medium = val(i)
            i += 1
        elif a == "--espnow-medium":
            c.espnow_medium = val(i)
            i += 1
        elif a == "--app":
            c.app = val(i)
            i += 1
        elif a == "--sink":
            c.set_sink(val(i), "--sink")
            i += 1
        elif a == "--telemetry":
            c.set_telemetry(val(i), "--telemetry")
            i += 1
        elif a == "--handshake-timeout":
            c.set_hs_timeout(val(i), "--handshake-timeout")
            i += 1
        else:
            raise ConfigError("unknown argument " + a + "; " + USAGE)
        i += 1
    if config_path:
        multicast = c.multicast
        c.apply_json(load_json(config_path), config_path)
        if multicast is not None:
            c.multicast = multicast   # the command line wins
    if c.profile_path is None:
        c.profile_path = default_profile(argv0)
    if seed_hex:
        try:
            c.seed = parse_seed(seed_hex.encode(), "seed")
        except ConfigError:
            raise ConfigError("--seed / SNAKEMESH_SEED: expected 64 hex digits")
        if len(seed_hex.strip()) != 64:
            raise ConfigError("--seed / SNAKEMESH_SEED: expected 64 hex digits")
    elif key_file:
        try:
            c.seed = read_seed_file(key_file)
        except ConfigError as e:
            c.key_error = str(e)
    else:
        c.key_error = "no key: give --key-file PATH or --seed HEX"
    return c
