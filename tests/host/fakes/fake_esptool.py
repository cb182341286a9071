"""Fake esptool for tests (never used by production code).

Installed with SNAKEMESH_ESPTOOL="python fake_esptool.py". Appends its argv
(and the size/sha256 of the file it was asked to write) as one JSON line to
$FAKE_ESPTOOL_LOG, then behaves according to $FAKE_ESPTOOL_MODE:

    ok            prints esptool-like progress, exit 0
    noport        the port does not exist
    permission    permission denied on the port
    busy          the port is locked by another program
    notespressif  nothing answers the bootloader sync
    wrongchip     an ESP32-S3 answers when --chip esp32 was asked
    timeout       the chip stops answering in the middle of the write

The failure texts are the ones esptool v5.6 prints (to stderr), exit 2.
"""
import hashlib
import json
import os
import sys


def main(argv):
    record = {"argv": argv}
    if argv and os.path.isfile(argv[-1]):
        with open(argv[-1], "rb") as f:
            data = f.read()
        record["file_size"] = len(data)
        record["file_sha256"] = hashlib.sha256(data).hexdigest()
    log = os.environ.get("FAKE_ESPTOOL_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(record) + "\n")
    mode = os.environ.get("FAKE_ESPTOOL_MODE", "ok")
    port = argv[argv.index("--port") + 1] if "--port" in argv else "?"
    chip = argv[argv.index("--chip") + 1] if "--chip" in argv else "auto"
    print("esptool v5.6.0")
    print("Serial port %s:" % port)
    sys.stdout.flush()
    fatal = "ERROR: A fatal error occurred: "
    if mode == "noport":
        sys.stderr.write(fatal + "Could not open %s, the port is busy or doesn't exist.\n"
                         "([Errno 2] could not open port %s: [Errno 2] No such file or directory: '%s')\n\n"
                         "Hint: Check if the port is correct and ESP connected\n\n" % (port, port, port))
        return 2
    if mode == "permission":
        sys.stderr.write(fatal + "Could not open %s, the port is busy or doesn't exist.\n"
                         "([Errno 13] could not open port %s: [Errno 13] Permission denied: '%s')\n\n"
                         "Hint: Try to add user into dialout or uucp group.\n\n" % (port, port, port))
        return 2
    if mode == "busy":
        sys.stderr.write(fatal + "Could not open %s, the port is busy or doesn't exist.\n"
                         "(Could not exclusively lock port %s: [Errno 11] Resource temporarily unavailable)\n\n"
                         % (port, port))
        return 2
    print("Connecting.....")
    if mode == "notespressif":
        sys.stderr.write(fatal + "Failed to connect to %s: No serial data received.\n"
                         "For troubleshooting steps visit: https://docs.espressif.com/projects/esptool/en/"
                         "latest/troubleshooting.html\n" % chip.upper().replace("ESP32S3", "ESP32-S3"))
        return 2
    if mode == "wrongchip":
        sys.stderr.write(fatal + "This chip is ESP32-S3, not ESP32. Wrong chip argument?\n")
        return 2
    print("Connected to %s on %s:" % (chip.upper(), port))
    print("Uploading stub flasher...")
    if "--erase-all" in argv:
        print("Erasing flash (this may take a while)...")
    addr = int(argv[-2], 16)
    for pct in (0, 25, 50, 75, 100):
        print("Writing at 0x%08x [%-30s] %5.1f%%" % (addr + pct * 64, "=" * (pct * 30 // 100), pct))
        sys.stdout.flush()
        if mode == "timeout" and pct == 50:
            sys.stderr.write(fatal + "Timed out waiting for packet content\n")
            return 2
    print("Wrote %d bytes at 0x%08x." % (record.get("file_size", 0), addr))
    print("Hash of data verified.")
    print("Hard resetting via RTS pin...")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
