"""`snakemesh flash`: exact esptool command per board, progress, and one clear
error line + exit code per failure. Only the device end is fake: a fake
esptool executable records its argv and prints esptool's real messages."""
import hashlib
import json
import os
import sys

import pytest

from host_tools.cli import main

FAKES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakes")


def image(path, chip_id, size=8192):
    data = bytearray(os.urandom(size))
    data[0] = 0xE9
    data[12] = chip_id & 0xFF
    data[13] = chip_id >> 8
    path.write_bytes(bytes(data))
    return str(path)


@pytest.fixture
def fake_esptool(tmp_path, monkeypatch):
    log = tmp_path / "esptool.log"
    monkeypatch.setenv("SNAKEMESH_ESPTOOL", "%s %s" % (sys.executable, os.path.join(FAKES, "fake_esptool.py")))
    monkeypatch.setenv("FAKE_ESPTOOL_LOG", str(log))
    monkeypatch.setenv("FAKE_ESPTOOL_MODE", "ok")

    def calls():
        if not log.exists():
            return []
        return [json.loads(l) for l in log.read_text().splitlines()]
    return calls


@pytest.fixture
def port(tmp_path):
    """A device path that exists (the fake esptool never opens it)."""
    p = tmp_path / "ttyUSB0"
    p.write_bytes(b"")
    return str(p)


@pytest.mark.parametrize("board,chip,offset,chip_id", [
    ("ESP32_GENERIC", "esp32", "0x1000", 0),
    ("ESP32_GENERIC_S3", "esp32s3", "0x0", 9),
    ("ESP32_GENERIC_C3", "esp32c3", "0x0", 5),
])
def test_flash_runs_esptool_with_chip_and_offset(board, chip, offset, chip_id, tmp_path, port, fake_esptool,
                                                 capfd):
    fw = image(tmp_path / "fw.bin", chip_id)
    rc = main(["flash", "--port", port, "--board", board, "--firmware", fw])
    out, err = capfd.readouterr()
    assert rc == 0, err
    calls = fake_esptool()
    assert len(calls) == 1
    assert calls[0]["argv"] == ["--chip", chip, "--port", port, "--baud", "460800", "write-flash", offset, fw]
    with open(fw, "rb") as f:
        assert calls[0]["file_sha256"] == hashlib.sha256(f.read()).hexdigest()
    # esptool's progress reaches the user, then our summary
    assert "Writing at" in out and "100.0%" in out
    assert "flashed %s" % board in out
    assert err == ""


def test_flash_erase_and_baud(tmp_path, port, fake_esptool, capfd):
    fw = image(tmp_path / "fw.bin", 0)
    rc = main(["flash", "--port", port, "--board", "ESP32_GENERIC", "--firmware", fw, "--erase",
               "--baud", "115200"])
    out, _ = capfd.readouterr()
    assert rc == 0
    assert fake_esptool()[0]["argv"] == ["--chip", "esp32", "--port", port, "--baud", "115200",
                                         "write-flash", "--erase-all", "0x1000", fw]
    assert "erasing the flash first" in out


def test_flash_accepts_url_ports(tmp_path, fake_esptool, capfd):
    fw = image(tmp_path / "fw.bin", 9)
    rc = main(["flash", "--port", "rfc2217://127.0.0.1:4000", "--board", "ESP32_GENERIC_S3", "--firmware", fw])
    assert rc == 0
    assert fake_esptool()[0]["argv"][3] == "rfc2217://127.0.0.1:4000"


FAILURES = [
    ("noport", 3, "no such port: {port}"),
    ("permission", 3, "permission denied on {port}"),
    ("busy", 3, "port {port} is busy"),
    ("notespressif", 3, "no Espressif chip answered on {port}"),
    ("wrongchip", 3, "wrong chip on {port}: board ESP32_GENERIC needs ESP32 but the board is ESP32-S3"),
    ("timeout", 4, "timeout talking to the bootloader on {port}"),
]


@pytest.mark.parametrize("mode,code,message", FAILURES)
def test_flash_failure_modes(mode, code, message, tmp_path, port, fake_esptool, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_ESPTOOL_MODE", mode)
    fw = image(tmp_path / "fw.bin", 0)
    rc = main(["flash", "--port", port, "--board", "ESP32_GENERIC", "--firmware", fw])
    _, err = capfd.readouterr()
    assert rc == code
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("snakemesh: error: " + message.format(port=port)), lines[0]
    assert "Traceback" not in err


def test_flash_failure_verbose_shows_esptool_output(tmp_path, port, fake_esptool, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_ESPTOOL_MODE", "wrongchip")
    fw = image(tmp_path / "fw.bin", 0)
    rc = main(["flash", "--port", port, "--board", "ESP32_GENERIC", "--firmware", fw, "--verbose"])
    _, err = capfd.readouterr()
    assert rc == 3
    assert "This chip is ESP32-S3, not ESP32" in err
    assert "Traceback" not in err


def test_flash_missing_port_is_caught_before_esptool(tmp_path, fake_esptool, capfd):
    fw = image(tmp_path / "fw.bin", 0)
    rc = main(["flash", "--port", "/dev/ttyNOPE9", "--board", "ESP32_GENERIC", "--firmware", fw])
    _, err = capfd.readouterr()
    assert rc == 3
    assert err.strip() == ("snakemesh: error: no such port: /dev/ttyNOPE9 (is the board plugged in? "
                           "see `ls /dev/tty*`)")
    assert fake_esptool() == []


@pytest.mark.parametrize("content,message", [
    (None, "cannot read firmware"),
    (b"", "is empty"),
    (b"MZ" + b"\0" * 100, "is not an ESP firmware image"),
])
def test_flash_bad_firmware_file(content, message, tmp_path, port, fake_esptool, capfd):
    fw = tmp_path / "fw.bin"
    if content is not None:
        fw.write_bytes(content)
    rc = main(["flash", "--port", port, "--board", "ESP32_GENERIC", "--firmware", str(fw)])
    _, err = capfd.readouterr()
    assert rc == 5
    assert message in err and len(err.strip().splitlines()) == 1
    assert fake_esptool() == []


def test_flash_refuses_image_for_another_chip(tmp_path, port, fake_esptool, capfd):
    fw = image(tmp_path / "fw.bin", 5)   # an ESP32-C3 image
    rc = main(["flash", "--port", port, "--board", "ESP32_GENERIC_S3", "--firmware", fw])
    _, err = capfd.readouterr()
    assert rc == 5
    assert "is built for esp32c3, but board ESP32_GENERIC_S3 is esp32s3" in err
    assert fake_esptool() == []


def test_flash_esptool_not_installed(tmp_path, port, monkeypatch, capfd):
    monkeypatch.setenv("SNAKEMESH_ESPTOOL", str(tmp_path / "no-such-esptool"))
    fw = image(tmp_path / "fw.bin", 0)
    rc = main(["flash", "--port", port, "--board", "ESP32_GENERIC", "--firmware", fw])
    _, err = capfd.readouterr()
    assert rc == 1
    assert err.startswith("snakemesh: error: cannot run esptool")


def test_flash_default_esptool_is_the_pinned_module(monkeypatch):
    from host_tools import boards
    monkeypatch.delenv("SNAKEMESH_ESPTOOL", raising=False)
    assert boards.tool_command("esptool") == [sys.executable, "-m", "esptool"]


def test_real_esptool_missing_port_message_maps(tmp_path, monkeypatch, capfd):
    """The real esptool (no fake) on a port path that vanished after our
    pre-check: its own message maps to the same clear line."""
    from host_tools import boards
    from host_tools.commands import flash
    monkeypatch.delenv("SNAKEMESH_ESPTOOL", raising=False)
    fw = image(tmp_path / "fw.bin", 0)
    board = boards.get_board("ESP32_GENERIC")
    result = boards.run_tool("esptool", flash.esptool_args("/dev/ttyGONE7", board, fw), timeout=60)
    assert result.returncode != 0
    err = flash.classify_esptool_failure("/dev/ttyGONE7", board, result)
    assert err.exit_code == 3 and err.message.startswith("no such port: /dev/ttyGONE7")
