"""`snakemesh keygen` / `snakemesh provision`: the seed file is 0600, only
the public key is printed, a board's key is never replaced without --force,
and the seed never appears on a command line or in any output."""
import binascii
import json
import os
import stat
import subprocess
import sys

import pytest
from nacl.signing import SigningKey

from host_tools import keystore
from host_tools.cli import main
from host_tools.commands import keys

HERE = os.path.dirname(os.path.abspath(__file__))
FAKES = os.path.join(HERE, "fakes")
REPO = os.path.dirname(os.path.dirname(HERE))
PORT = "socket://127.0.0.1:9"     # the fake mpremote does not open it


def nacl_pub(seed):
    return binascii.hexlify(bytes(SigningKey(seed).verify_key)).decode()


@pytest.fixture
def board(tmp_path, monkeypatch):
    root = tmp_path / "board"
    root.mkdir()
    log = tmp_path / "mpremote.log"
    monkeypatch.setenv("SNAKEMESH_MPREMOTE", "%s %s" % (sys.executable, os.path.join(FAKES, "fake_mpremote.py")))
    monkeypatch.setenv("FAKE_MPREMOTE_ROOT", str(root))
    monkeypatch.setenv("FAKE_MPREMOTE_LOG", str(log))
    monkeypatch.setenv("FAKE_MPREMOTE_MODE", "ok")

    class B(object):
        pass
    b = B()
    b.root = root
    b.calls = lambda: [json.loads(l)["argv"] for l in log.read_text().splitlines()] if log.exists() else []
    return b


def deployed(board):
    """The firmware is on the fake board (its /snake folder exists)."""
    (board.root / "snake").mkdir()


# ------------------------------------------------------------------ keygen --

def test_keygen_writes_0600_seed_and_prints_only_the_public_key(tmp_path, capfd):
    path = tmp_path / "node.key"
    assert main(["keygen", "--out", str(path)]) == 0
    out, err = capfd.readouterr()
    seed = path.read_bytes()
    assert len(seed) == 32
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o600
    assert out == nacl_pub(seed) + "\n"
    assert err == ""
    assert binascii.hexlify(seed).decode() not in out + err


def test_keygen_fresh_keys_differ(tmp_path, capfd):
    assert main(["keygen", "--out", str(tmp_path / "a")]) == 0
    assert main(["keygen", "--out", str(tmp_path / "b")]) == 0
    a, b = capfd.readouterr().out.split()
    assert a != b and len(a) == len(b) == 64


def test_keygen_refuses_to_overwrite(tmp_path, capfd):
    path = tmp_path / "node.key"
    path.write_bytes(b"k" * 32)
    rc = main(["keygen", "--out", str(path)])
    _, err = capfd.readouterr()
    assert rc == 5
    assert err.strip() == "snakemesh: error: %s already exists; use --force to replace it (the old key is lost)" % path
    assert path.read_bytes() == b"k" * 32


def test_keygen_force_replaces_with_0600_even_if_old_file_was_open(tmp_path, capfd):
    path = tmp_path / "node.key"
    path.write_bytes(b"k" * 32)
    os.chmod(str(path), 0o644)
    assert main(["keygen", "--out", str(path), "--force"]) == 0
    assert path.read_bytes() != b"k" * 32
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o600
    assert capfd.readouterr().out.strip() == nacl_pub(path.read_bytes())


def test_keygen_into_missing_folder(tmp_path, capfd):
    rc = main(["keygen", "--out", str(tmp_path / "nope" / "k")])
    _, err = capfd.readouterr()
    assert rc == 5 and err.startswith("snakemesh: error: cannot write key file")


def test_public_key_matches_pynacl():
    for i in range(5):
        seed = bytes([i]) * 32
        assert keystore.to_hex(keystore.public_key(seed)) == nacl_pub(seed)


@pytest.mark.parametrize("data,ok", [
    (b"\x01" * 32, True),
    (b"01" * 32, True),
    (b"  " + b"ab" * 32 + b"\n", True),
    (b"AB" * 32, True),
    (b"\x01" * 31, False),
    (b"0g" * 32, False),
    (b"01" * 31, False),
    (b"\x01" * 64, False),
    (b"", False),
])
def test_parse_seed_formats(data, ok):
    if ok:
        assert len(keystore.parse_seed(data)) == 32
    else:
        with pytest.raises(keystore.KeyFormatError) as e:
            keystore.parse_seed(data, "F")
        assert e.value.message.startswith("unknown key format in F")
        assert e.value.exit_code == 5


# --------------------------------------------------------------- provision --

def test_provision_host_key_copies_seed_never_on_a_command_line(tmp_path, board, capfd):
    seed = os.urandom(32)
    kf = tmp_path / "node.key"
    kf.write_text(binascii.hexlify(seed).decode() + "\n")     # hex text is accepted
    os.chmod(str(kf), 0o600)
    deployed(board)
    assert main(["provision", "--port", PORT, "--key-file", str(kf)]) == 0
    out, err = capfd.readouterr()
    assert out == nacl_pub(seed) + "\n"
    assert err == ""
    assert (board.root / "key.bin").read_bytes() == seed
    calls = board.calls()
    assert len(calls) == 2
    assert calls[0][:3] == ["connect", PORT, "exec"] and "SMKEY" in calls[0][3] and len(calls[0]) == 4
    assert calls[1][2:5] == ["fs", "cp", "-f"] and calls[1][6] == ":/key.bin"
    assert calls[1][7:9] == ["+", "exec"] and calls[1][10:] == ["+", "reset"]     # the node restarts
    assert not os.path.exists(calls[1][5])            # the temp copy is gone
    everything = json.dumps(calls) + out + err
    assert binascii.hexlify(seed).decode() not in everything
    assert repr(seed)[2:-1] not in everything


def test_provision_refuses_existing_key_without_force(tmp_path, board, capfd):
    (board.root / "key.bin").write_bytes(b"o" * 32)
    kf = tmp_path / "node.key"
    kf.write_bytes(os.urandom(32))
    os.chmod(str(kf), 0o600)
    rc = main(["provision", "--port", PORT, "--key-file", str(kf)])
    out, err = capfd.readouterr()
    assert rc == 1
    assert err.strip() == ("snakemesh: error: the board on %s already has a key (/key.bin); use --force to "
                           "replace it (the node gets a new identity)" % PORT)
    assert out == ""
    assert (board.root / "key.bin").read_bytes() == b"o" * 32
    assert board.calls()[-1] == ["connect", PORT, "reset"]       # the interrupted node restarts
    # --force replaces it
    assert main(["provision", "--port", PORT, "--key-file", str(kf), "--force"]) == 0
    assert (board.root / "key.bin").read_bytes() == kf.read_bytes()


def test_provision_host_key_without_firmware_checks_size_only(tmp_path, board, capfd):
    kf = tmp_path / "node.key"
    kf.write_bytes(os.urandom(32))
    os.chmod(str(kf), 0o600)
    assert main(["provision", "--port", PORT, "--key-file", str(kf)]) == 0
    assert capfd.readouterr().out.strip() == nacl_pub(kf.read_bytes())


def test_provision_warns_about_a_readable_key_file(tmp_path, board, capfd):
    kf = tmp_path / "node.key"
    kf.write_bytes(os.urandom(32))
    os.chmod(str(kf), 0o644)
    assert main(["provision", "--port", PORT, "--key-file", str(kf)]) == 0
    err = capfd.readouterr().err
    assert "warning: key file %s is readable by other users" % kf in err


def test_provision_unknown_key_format(tmp_path, board, capfd):
    kf = tmp_path / "node.key"
    kf.write_text("not a key at all\n")
    rc = main(["provision", "--port", PORT, "--key-file", str(kf)])
    _, err = capfd.readouterr()
    assert rc == 5
    assert err.strip() == ("snakemesh: error: unknown key format in %s: expected a 32-byte raw seed or 64 hex "
                           "digits (got 17 bytes)" % kf)
    assert board.calls() == []


def test_provision_missing_key_file(tmp_path, board, capfd):
    rc = main(["provision", "--port", PORT, "--key-file", str(tmp_path / "none.key")])
    assert rc == 5
    assert "cannot read key file" in capfd.readouterr().err


def test_provision_on_device_generates_on_the_board(board, capfd):
    deployed(board)
    assert main(["provision", "--port", PORT]) == 0
    out, err = capfd.readouterr()
    seed = (board.root / "key.bin").read_bytes()
    assert len(seed) == 32
    assert out == nacl_pub(seed) + "\n"          # the board's public key, derived on the board
    calls = board.calls()
    assert len(calls) == 1 and calls[0][2] == "exec" and calls[0][4:] == ["+", "reset"]
    assert binascii.hexlify(seed).decode() not in json.dumps(calls) + out + err
    # a second time: refused, key unchanged
    rc = main(["provision", "--port", PORT, "--on-device"])
    assert rc == 1 and "already has a key" in capfd.readouterr().err
    assert (board.root / "key.bin").read_bytes() == seed
    assert main(["provision", "--port", PORT, "--on-device", "--force"]) == 0
    assert (board.root / "key.bin").read_bytes() != seed
    assert not (board.root / "key.bin.tmp").exists()


def test_provision_no_reset(board, capfd):
    deployed(board)
    assert main(["provision", "--port", PORT, "--no-reset"]) == 0
    assert board.calls()[0][2:] == ["exec", board.calls()[0][3]]


def test_provision_on_device_needs_the_firmware(board, capfd):
    rc = main(["provision", "--port", PORT, "--on-device"])
    _, err = capfd.readouterr()
    assert rc == 3
    assert "the snakemesh firmware is not on the board" in err
    assert not (board.root / "key.bin").exists()


def test_provision_port_busy(board, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_MPREMOTE_MODE", "noaccess")
    rc = main(["provision", "--port", PORT])
    _, err = capfd.readouterr()
    assert rc == 3
    assert err.strip() == ("snakemesh: error: cannot open %s (no such port, or another program has it open)"
                           % PORT)


def test_provision_no_such_port(board, capfd):
    rc = main(["provision", "--port", "/dev/ttyNOPE5"])
    assert rc == 3
    assert capfd.readouterr().err.startswith("snakemesh: error: no such port: /dev/ttyNOPE5")


# ----------------------------------------------- board scripts, real MicroPython

MICROPYTHON = os.path.join(REPO, ".venv", "bin", "micropython")


def run_mp(code):
    env = dict(os.environ, MICROPYPATH=os.path.join(REPO, "firmware") + ":" + os.path.join(REPO, "lib"))
    r = subprocess.run([MICROPYTHON, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_key_scripts_run_under_micropython(tmp_path):
    """The on-board key code is plain MicroPython; with the real firmware's
    snake.crypto it derives the same public key as PyNaCl."""
    if not os.path.exists(os.path.join(REPO, "firmware", "snake", "crypto.py")):
        pytest.skip("firmware/snake/crypto.py not written yet")
    root = str(tmp_path)
    from host_tools.commands.deploy import parse_marker
    assert parse_marker(run_mp(keys.script_key_exists(root)), "SMKEY") == "0"
    out = run_mp(keys.script_generate(False, root))
    seed = (tmp_path / "key.bin").read_bytes()
    assert parse_marker(out, "SMPUB") == nacl_pub(seed)
    assert binascii.hexlify(seed).decode() not in out
    assert parse_marker(run_mp(keys.script_key_exists(root)), "SMKEY") == "1"
    assert parse_marker(run_mp(keys.script_generate(False, root)), "SMKEY") == "exists"
    out = run_mp(keys.script_check(root))
    assert parse_marker(out, "SMSIZE") == "32" and parse_marker(out, "SMPUB") == nacl_pub(seed)
    run_mp(keys.script_generate(True, root))
    assert (tmp_path / "key.bin").read_bytes() != seed
