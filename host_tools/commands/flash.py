"""`snakemesh flash`: write a MicroPython firmware image with esptool.

    snakemesh flash --port /dev/ttyUSB0 --board ESP32_GENERIC \\
        --firmware ESP32_GENERIC-20250415-v1.29.0.bin [--erase] [--baud 460800]

The chip name and flash offset come from host_tools.boards. The image is
checked before anything touches the board (ESP image magic, and the chip id
in its header must match the board). esptool's own progress output goes
straight to the terminal; its failures are turned into one clear line.
"""
import os

from host_tools import boards
from host_tools.errors import CliError, DeviceError, InputError, TimeoutError_

ESP_IMAGE_MAGIC = 0xE9
DEFAULT_BAUD = 460800


def register(subparsers):
    p = subparsers.add_parser(
        "flash", help="write a MicroPython firmware image to a board (esptool)",
        description="Write a MicroPython .bin to an ESP32 board with esptool, at the "
                    "flash offset of the board (0x1000 on ESP32, 0x0 on S3/C3).")
    p.add_argument("--port", required=True, help="serial port (device path or pyserial URL)")
    p.add_argument("--board", required=True, choices=boards.board_names())
    p.add_argument("--firmware", required=True, metavar="FILE.bin", help="MicroPython firmware image")
    p.add_argument("--erase", action="store_true", help="erase the whole flash first (wipes the filesystem)")
    p.add_argument("--baud", type=int, default=DEFAULT_BAUD, help="flashing baud rate (default %(default)s)")
    boards.add_verbose(p)
    p.set_defaults(func=run)


def check_image(path, board):
    """Validate FILE.bin for `board`; return its size. Raises InputError."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
            f.seek(0, os.SEEK_END)
            size = f.tell()
    except IsADirectoryError:
        raise InputError("firmware %s is a directory, not a .bin file" % path)
    except OSError as e:
        raise InputError("cannot read firmware %s: %s" % (path, e.strerror or e))
    if size == 0:
        raise InputError("firmware %s is empty" % path)
    if head[0] != ESP_IMAGE_MAGIC:
        raise InputError("firmware %s is not an ESP firmware image (first byte 0x%02x, expected 0x%02x); "
                         "download the .bin for %s from micropython.org" % (path, head[0], ESP_IMAGE_MAGIC,
                                                                              board.image_name()))
    if len(head) >= 14:
        chip_id = head[12] | (head[13] << 8)
        if chip_id != board.image_chip_id:
            other = boards.IMAGE_CHIP_NAMES.get(chip_id, "chip id %d" % chip_id)
            raise InputError("firmware %s is built for %s, but board %s is %s (wrong --firmware or --board)"
                             % (path, other, board.name, board.chip))
    return size


def esptool_args(port, board, firmware, erase=False, baud=DEFAULT_BAUD):
    args = ["--chip", board.chip, "--port", port, "--baud", str(baud), "write-flash"]
    if erase:
        args.append("--erase-all")
    args += [board.offset_hex(), firmware]
    return args


def classify_esptool_failure(port, board, result):
    """Map esptool's output to one clear CliError."""
    text = result.output()
    low = text.lower()
    detail = result.tail()
    if "errno 2]" in low or "no such file or directory" in low or "filenotfounderror" in low:
        return DeviceError("no such port: %s (is the board plugged in?)" % port, detail=detail)
    if "permission denied" in low or "errno 13]" in low or "access is denied" in low:
        return DeviceError("permission denied on %s (add your user to the dialout group, then log in again)"
                           % port, detail=detail)
    if ("could not exclusively lock" in low or "resource busy" in low or "errno 16]" in low
            or "errno 11]" in low or "resource temporarily unavailable" in low):
        return DeviceError("port %s is busy (close the program using it: a serial monitor, mpremote, "
                           "snakemesh monitor)" % port, detail=detail)
    if "wrong chip argument" in low or "this chip is " in low:
        found = ""
        for line in text.splitlines():
            i = line.find("This chip is ")
            if i >= 0:
                found = line[i + len("This chip is "):].split(",")[0].strip()
                break
        return DeviceError("wrong chip on %s: board %s needs %s but the board is %s (check --board)"
                           % (port, board.name, board.label, found or "another chip"), detail=detail)
    if ("failed to connect" in low or "no serial data received" in low
            or "invalid head of packet" in low or "unexpected chip" in low):
        return DeviceError("no Espressif chip answered on %s (not an Espressif chip, or it is not in the "
                           "bootloader: hold BOOT while pressing RESET and retry)" % port, detail=detail)
    if "timed out" in low or "timeout" in low or "stopped" in low:
        return TimeoutError_("timeout talking to the bootloader on %s (bad cable or baud rate; try --baud 115200)"
                             % port, detail=detail)
    if "could not open" in low:
        return DeviceError("cannot open %s (busy or missing)" % port, detail=detail)
    last = detail.splitlines()[-1] if detail else "no output"
    return CliError("esptool failed (exit %d): %s" % (result.returncode, last), detail=detail)


def run(args):
    board = boards.get_board(args.board)
    size = check_image(args.firmware, board)
    boards.precheck_port(args.port)
    print("flashing %s (%d bytes) to %s: chip %s, offset %s%s"
          % (args.firmware, size, args.port, board.chip, board.offset_hex(),
             ", erasing the flash first" if args.erase else ""), flush=True)
    result = boards.run_tool("esptool", esptool_args(args.port, board, args.firmware, args.erase, args.baud),
                             capture_stdout=False)
    if result.returncode != 0:
        raise classify_esptool_failure(args.port, board, result)
    if getattr(args, "verbose", False) and result.stderr.strip():
        print(result.stderr.rstrip())
    if has_frozen_firmware(args.firmware):
        print("flashed %s with the firmware frozen in (no deploy); next: copy boards/%s/profile.json to the "
              "board's /profile.json, then snakemesh provision --port %s (%s)"
              % (board.name, board.name, args.port, boards.FIRST_BOARD_GUIDE))
    else:
        print("flashed %s; next: snakemesh deploy --port %s --board %s" % (board.name, args.port, board.name))
    return 0


# A frozen module's name is a string in the image (mp_frozen_names); this
# one is in every image `make firmware-image` builds and in no stock one.
FROZEN_MARK = b"snake/router.py\0"


def has_frozen_firmware(path):
    """True for an image with the snakemesh firmware frozen in: deploying
    .mpy files to it would shadow the frozen modules with heap copies."""
    try:
        with open(path, "rb") as f:
            return FROZEN_MARK in f.read()
    except OSError:
        return False
