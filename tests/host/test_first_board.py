"""docs/guides/FIRST_BOARD.md, driven as far as this machine can: every
command the guide gives is run as written (only the port and the image
file are this test's), against the fake board end (fake esptool, mpremote
and console node) and a fake ESP-IDF build.

- S3 (stock image + deploy): flash -> deploy -> provision -> status.
- Plain ESP32 (custom image): deploy refuses and names the guide; `make
  firmware-image` without ESP-IDF says what it needs and never sends the
  user back to stock MicroPython + deploy; with IDF_PATH and MICROPY_DIR the
  build is the command the guide shows (dry run and a fake esp32 port), the
  image lands where the guide says, and flash -> profile copy -> provision
  -> status follow it."""
import os
import shlex
import subprocess
import sys

import pytest

from host_tools import boards
from host_tools.cli import main

HERE = os.path.dirname(os.path.abspath(__file__))
FAKES = os.path.join(HERE, "fakes")
REPO = os.path.dirname(os.path.dirname(HERE))
GUIDE = os.path.join(REPO, boards.FIRST_BOARD_GUIDE)
sys.path.insert(0, FAKES)
from fake_node import FakeNode  # noqa: E402

GUIDE_PORT = "/dev/ttyUSB0"


def guide():
    with open(GUIDE, encoding="utf-8") as f:
        return f.read()


def guide_command(prefix):
    """The guide's command line that starts with `prefix`, as argv (one
    command, though each board's section may repeat it)."""
    lines = set(l.strip() for l in guide().splitlines() if l.strip().startswith(prefix))
    assert len(lines) == 1, "%s: %d commands start with %r" % (boards.FIRST_BOARD_GUIDE, len(lines), prefix)
    return shlex.split(lines.pop())


def cli(argv, port, **files):
    """Run a `snakemesh ...` line of the guide with this test's port and files."""
    assert argv[0] == "snakemesh"
    out = []
    for a in argv[1:]:
        a = a.replace(GUIDE_PORT, port)
        out.append(files.get(a, a))
    return main(out)


def image(path, chip_id, size=8192):
    data = bytearray(size)
    data[0] = 0xE9
    data[12] = chip_id
    path.write_bytes(bytes(data))
    return str(path)


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    monkeypatch.setenv("SNAKEMESH_ESPTOOL", "%s %s" % (sys.executable, os.path.join(FAKES, "fake_esptool.py")))
    monkeypatch.setenv("FAKE_ESPTOOL_LOG", str(tmp_path / "esptool.log"))
    monkeypatch.setenv("FAKE_ESPTOOL_MODE", "ok")
    board = tmp_path / "board"
    board.mkdir()
    monkeypatch.setenv("SNAKEMESH_MPREMOTE", "%s -S %s" % (sys.executable, os.path.join(FAKES, "fake_mpremote.py")))
    monkeypatch.setenv("FAKE_MPREMOTE_ROOT", str(board))
    monkeypatch.setenv("FAKE_MPREMOTE_LOG", str(tmp_path / "mpremote.log"))
    monkeypatch.setenv("FAKE_MPREMOTE_MODE", "ok")
    monkeypatch.delenv("FAKE_MPREMOTE_DROP", raising=False)
    monkeypatch.delenv("FAKE_MPREMOTE_FROZEN", raising=False)
    return board


def test_s3_stock_image_deploy_provision_status(fakes, tmp_path, monkeypatch, capfd):
    flash = guide_command("snakemesh flash --port /dev/ttyUSB0 --board ESP32_GENERIC_S3")
    stock = flash[flash.index("--firmware") + 1]
    monkeypatch.setenv("FAKE_MPREMOTE_HEAP", "%d,%d" % (200 * 1024, 8000))   # an S3 without PSRAM
    with FakeNode("ok", "pty", board="ESP32_GENERIC_S3") as node:
        assert cli(flash, node.port, **{stock: image(tmp_path / stock, 9)}) == 0
        assert "next: snakemesh deploy" in capfd.readouterr().out
        assert cli(guide_command("snakemesh deploy"), node.port) == 0
        out = capfd.readouterr().out
        assert "deployed: node on %s answers" % node.port in out and "on ESP32_GENERIC_S3" in out
        assert {"main.py", "profile.json", "snake", "lib"} <= set(os.listdir(str(fakes)))
        provision = [a for a in guide_command("snakemesh provision") if a != "--on-device"]
        assert cli(provision, node.port) == 0
        pub = capfd.readouterr().out.strip()
        assert len(pub) == 64 and (fakes / "key.bin").stat().st_size == 32
        assert cli(guide_command("snakemesh status"), node.port) == 0
        assert node.key[:8] in capfd.readouterr().out


def test_deploy_refusal_on_a_plain_esp32_names_the_guide(fakes, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_MPREMOTE_HEAP", "%d,%d" % (110 * 1024, 4000))
    with FakeNode("ok", "pty", board="ESP32_GENERIC") as node:
        rc = main(["deploy", "--port", node.port, "--board", "ESP32_GENERIC"])
    err = capfd.readouterr().err
    assert rc == 3 and err.count("\n") == 1
    assert "make firmware-image BOARD=ESP32_GENERIC" in err and boards.FIRST_BOARD_GUIDE in err
    assert os.listdir(str(fakes)) == []


def make(args, env_extra, dry=False):
    env = dict(os.environ)
    for k in ("IDF_PATH", "MICROPY_DIR", "BOARD", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(k, None)
    env.update(env_extra)
    argv = ["make", "--no-print-directory", "-C", REPO] + (["-n"] if dry else []) + ["firmware-image"] + args
    return subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=60)


def test_firmware_image_without_esp_idf_says_what_it_needs_never_stock_for_a_plain_esp32():
    r = make(["BOARD=ESP32_GENERIC"], {})
    assert r.returncode != 0, r.stdout
    out = r.stdout
    text = guide()
    for need in ("ESP-IDF v", "MicroPython 1.", "IDF_PATH", "MICROPY_DIR", boards.FIRST_BOARD_GUIDE):
        assert need in out, (need, out)
    # the versions it asks for are the guide's
    idf = out.split("ESP-IDF ")[1].split()[0]
    mp = out.split("MicroPython ")[1].split()[0]
    assert "ESP-IDF %s" % idf in text and "v%s" % mp in text
    # the path deploy refused for this board is not offered again
    low = out.lower()
    assert "snakemesh deploy" not in low and "flash stock" not in low
    # another board may take stock + deploy, and is told so
    s3 = make(["BOARD=ESP32_GENERIC_S3"], {})
    assert s3.returncode != 0 and "snakemesh deploy --board ESP32_GENERIC_S3" in s3.stdout
    assert boards.FIRST_BOARD_GUIDE in s3.stdout


FAKE_PORT_MAKEFILE = """\
BOARD ?= ESP32_GENERIC
BUILD ?= build-$(BOARD)
all:
\t@echo "esp32 BOARD=$(BOARD) FROZEN_MANIFEST=$(FROZEN_MANIFEST) SNAKEMESH_ROOT=$$SNAKEMESH_ROOT" > build.log
\t@mkdir -p $(BUILD) && printf '\\351' > $(BUILD)/firmware.bin && head -c 8191 /dev/zero >> $(BUILD)/firmware.bin \\
	  && printf 'snake/router.py\\0' >> $(BUILD)/firmware.bin
"""


@pytest.fixture
def fake_idf(tmp_path):
    idf = tmp_path / "esp-idf"
    idf.mkdir()
    mp = tmp_path / "micropython"
    port = mp / "ports" / "esp32"
    port.mkdir(parents=True)
    (port / "Makefile").write_text(FAKE_PORT_MAKEFILE)
    return {"IDF_PATH": str(idf), "MICROPY_DIR": str(mp)}


def test_firmware_image_build_is_the_guides_command(fake_idf):
    # the guide's build line with this checkout for <checkout> ($MICROPY_DIR
    # stays: the recipe leaves it to the shell, as the guide writes it)
    shown = [a.replace("<checkout>", REPO) for a in guide_command("make -C $MICROPY_DIR/ports/esp32")]
    r = make(["BOARD=ESP32_GENERIC"], fake_idf, dry=True)
    assert r.returncode == 0, r.stdout
    lines = r.stdout.replace("\\\n", " ").splitlines()       # make -n keeps the recipe's line breaks
    runs = [shlex.split(l) for l in lines if l.startswith("SNAKEMESH_ROOT=") and "ports/esp32" in l]
    assert runs, r.stdout
    env, argv = runs[0][0], runs[0][1:]
    assert env == "SNAKEMESH_ROOT=%s" % REPO     # what the manifest reads the checkout from
    assert os.path.basename(argv[0]) == "make" and argv[1:] == shown[1:], (argv, shown)
    # a dry run builds nothing
    assert not os.path.exists(os.path.join(fake_idf["MICROPY_DIR"], "ports", "esp32", "build-ESP32_GENERIC"))


def test_plain_esp32_custom_image_flash_profile_provision_status(fakes, fake_idf, monkeypatch, capfd):
    r = make(["BOARD=ESP32_GENERIC"], fake_idf)
    assert r.returncode == 0, r.stdout
    port_dir = os.path.join(fake_idf["MICROPY_DIR"], "ports", "esp32")
    with open(os.path.join(port_dir, "build.log")) as f:
        assert f.read().split() == ["esp32", "BOARD=ESP32_GENERIC",
                                    "FROZEN_MANIFEST=%s/boards/ESP32_GENERIC/manifest.py" % REPO,
                                    "SNAKEMESH_ROOT=%s" % REPO]
    flash = guide_command("snakemesh flash --port /dev/ttyUSB0 --board ESP32_GENERIC ")
    where = flash[flash.index("--firmware") + 1]
    built = where.replace("$MICROPY_DIR", fake_idf["MICROPY_DIR"])
    assert os.path.isfile(built), "the image is not where the guide says: %s" % where
    assert built in r.stdout          # make says where it is, too
    # the image has the firmware frozen in: the fake board imports snake
    # with no /snake on its filesystem, and deploy is not part of the path
    monkeypatch.setenv("FAKE_MPREMOTE_FROZEN", "1")
    monkeypatch.setenv("FAKE_MPREMOTE_HEAP", "%d,%d" % (110 * 1024, 4000))
    assert "snakemesh deploy --port /dev/ttyUSB0 --board ESP32_GENERIC\n" not in guide()
    with FakeNode("ok", "pty", board="ESP32_GENERIC") as node:
        assert cli(flash, node.port, **{where: built}) == 0
        out = capfd.readouterr().out
        assert "offset 0x1000" in out and "(no deploy)" in out and boards.FIRST_BOARD_GUIDE in out
        assert "snakemesh deploy" not in out
        copy = guide_command(".venv/bin/mpremote connect /dev/ttyUSB0 fs cp boards/ESP32_GENERIC/profile.json")
        cmd = shlex.split(os.environ["SNAKEMESH_MPREMOTE"]) + [a.replace(GUIDE_PORT, node.port) for a in copy[1:]]
        assert subprocess.run(cmd, cwd=REPO).returncode == 0
        capfd.readouterr()
        with open(os.path.join(REPO, "boards", "ESP32_GENERIC", "profile.json"), "rb") as f:
            assert (fakes / "profile.json").read_bytes() == f.read()
        assert cli(guide_command("snakemesh provision"), node.port) == 0
        assert len(capfd.readouterr().out.strip()) == 64 and (fakes / "key.bin").stat().st_size == 32
        assert cli(guide_command("snakemesh status"), node.port) == 0
        assert node.key[:8] in capfd.readouterr().out
    assert sorted(os.listdir(str(fakes))) == ["key.bin", "profile.json"]


def test_readme_first_board_commands_are_the_guides():
    """README's short "A first board" repeats commands of the guide, never
    its own variants of them."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme.split("## A first board\n", 1)[1].split("\n## ", 1)[0]
    assert boards.FIRST_BOARD_GUIDE in section
    cmds = [l.strip() for l in section.splitlines() if l.startswith("      snakemesh ")]
    assert cmds, "the README shows the stock path's commands"
    lines = set(l.strip() for l in guide().splitlines())
    assert [c for c in cmds if c not in lines] == []


def test_provision_before_the_firmware_names_the_guide(fakes, capfd):
    """A plain ESP32 fresh from a stock flash has no firmware to make a key
    with: provision says so and where both ways to get it are."""
    rc = main(["provision", "--port", "socket://127.0.0.1:9"])
    err = capfd.readouterr().err
    assert rc == 3 and err.count("\n") == 1
    assert "not on the board" in err and boards.FIRST_BOARD_GUIDE in err
    assert os.listdir(str(fakes)) == []
