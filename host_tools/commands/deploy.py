"""`snakemesh deploy` and `snakemesh build-mpy`: put the firmware on a board
that runs stock MicroPython.

    snakemesh build-mpy --board ESP32_GENERIC --out build/mpy
    snakemesh deploy --port /dev/ttyUSB0 --board ESP32_GENERIC [--force]

build-mpy compiles firmware/ and lib/ with mpy-cross for the board's
architecture into the device layout (docs/reference/INTERFACES.md):

    /main.py          firmware/main.py, as source (MicroPython runs main.py)
    /snake/**.mpy     firmware/snake/**.py (not firmware/snakehost: host-only)
    /lib/*.mpy        lib/**.py
    /profile.json     boards/<BOARD>/profile.json

deploy builds that, then with mpremote: reads the board's free heap in a
fresh interpreter and refuses (one line: what to do instead) when it is
below what the firmware needs as .mpy (boards.HEAP_NEED, docs/reports/MEMORY.md);
reads the board's manifest
/.snakemesh-manifest.json (device path -> sha256 of the uploaded content),
uploads only what changed (first marking those entries dirty in the manifest,
writing the complete manifest last), removes files that are no longer part
of the firmware, verifies every file by listing sizes on the board, resets
it, and asks the node's console for its version.

Only stock MicroPython features are used on the board (os, open), so a board
fresh from `snakemesh flash` works.
"""
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time

from host_tools import REPO_ROOT, boards
from host_tools.errors import CliError, DeviceError, InputError, TimeoutError_

MANIFEST = "/.snakemesh-manifest.json"
DEFAULT_TOOL_TIMEOUT = 120.0
DEFAULT_BOOT_TIMEOUT = 20.0


# ---------------------------------------------------------------- mpremote ---

class Mpremote(object):
    """Runs mpremote against one port and maps its failures to CliErrors."""

    def __init__(self, port, timeout=DEFAULT_TOOL_TIMEOUT):
        self.port = port
        self.timeout = timeout
        self.calls = 0

    def argv(self, commands):
        """commands: list of mpremote commands (each a list of args)."""
        args = ["connect", self.port]
        for i, c in enumerate(commands):
            if i:
                args.append("+")
            args.extend(c)
        return args

    def run(self, commands, what, on_line=None, check=True):
        self.calls += 1
        result = boards.run_tool("mpremote", self.argv(commands), timeout=self.timeout,
                                 on_line=on_line, what=what + " on " + self.port)
        if check and result.returncode != 0:
            raise self.classify(result, what)
        return result

    def exec_(self, code, what, check=True):
        return self.run([["exec", code]], what, check=check)

    def classify(self, result, what):
        text = result.output()
        low = text.lower()
        detail = "$ " + " ".join(result.argv[:6]) + (" ..." if len(result.argv) > 6 else "") \
            + "\n" + result.tail()
        port = self.port
        if "failed to access" in low:
            if boards.is_url(port) or not port.startswith("/"):
                return DeviceError("cannot open %s (no such port, or another program has it open)" % port,
                                   detail=detail)
            return DeviceError("port %s is busy (another program has it open: a serial monitor, "
                               "snakemesh monitor or console)" % port, detail=detail)
        if "could not enter raw repl" in low:
            return DeviceError("board on %s did not enter the raw REPL (is it running MicroPython? a program "
                               "that ignores Ctrl-C keeps it busy: reset the board and retry)" % port,
                               detail=detail)
        if "timeout waiting" in low or "timed out" in low:
            return TimeoutError_("timeout: the board on %s stopped answering mpremote (%s)" % (port, what),
                                 detail=detail)
        if ("device disconnected" in low or "input/output error" in low or "errno 5]" in low
                or "readiness to read but returned no data" in low):
            return DeviceError("%s disconnected during %s" % (port, what), detail=detail)
        if "traceback (most recent call last)" in low:
            last = [l for l in text.splitlines() if l.strip()][-1]
            return DeviceError("%s failed on the board on %s: %s" % (what, port, last.strip()), detail=detail)
        tail = result.tail(1) or "no output"
        return CliError("mpremote failed during %s on %s (exit %d): %s"
                        % (what, port, result.returncode, tail.strip()), detail=detail)


# ------------------------------------------------------------------- build ---

class BuildItem(object):
    __slots__ = ("device_path", "local_path", "source", "size", "sha256")

    def __init__(self, device_path, local_path, source):
        self.device_path = device_path
        self.local_path = local_path
        self.source = source
        with open(local_path, "rb") as f:
            data = f.read()
        self.size = len(data)
        self.sha256 = hashlib.sha256(data).hexdigest()


def _py_files(top):
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py") and not fn.startswith("."):
                out.append(os.path.join(dirpath, fn))
    return out


def source_plan(root):
    """[(source path, device path, kind)] with kind 'mpy' or 'copy'."""
    fw = os.path.join(root, "firmware")
    lib = os.path.join(root, "lib")
    if not os.path.isfile(os.path.join(fw, "main.py")):
        raise InputError("no firmware/main.py under %s: nothing to deploy" % root)
    plan = []
    plan.append((os.path.join(fw, "main.py"), "/main.py", "copy"))
    # the package a board runs; firmware/snakehost is host-only code
    for path in _py_files(os.path.join(fw, "snake")):
        rel = os.path.relpath(path, fw).replace(os.sep, "/")
        plan.append((path, "/" + rel[:-3] + ".mpy", "mpy"))
    if os.path.isdir(lib):
        for path in _py_files(lib):
            rel = os.path.relpath(path, lib).replace(os.sep, "/")
            plan.append((path, "/lib/" + rel[:-3] + ".mpy", "mpy"))
    return plan


def board_file_name(dev):
    """The name MicroPython on the board gives the module file at device
    path `dev` when it imports it (its __file__): through sys.path's "/lib"
    for /lib/..., through "" (the working directory, /) for the rest. A
    .mpy's source name is a qstr in the board's heap, and so is __file__:
    the same string is one qstr (docs/reports/MEMORY.md)."""
    return dev if dev.startswith("/lib/") else dev.lstrip("/")


def mpy_cross(src, out, arch, source_name, source_lines=False, label=None):
    """Compile one file; InputError with the compiler's message on failure
    (naming the file by `label`, default source_name). Without source_lines
    the .mpy has no line-number tables: a few KB less of the board's heap
    (docs/reports/MEMORY.md); tracebacks then show no lines."""
    label = label or source_name
    args = ["-march=" + arch, "-s", source_name]
    if not source_lines:
        args += ["-X", "no-source-lines"]
    result = boards.run_tool("mpy-cross", args + ["-o", out, src],
                             timeout=60, what="compiling " + label)
    if result.returncode != 0:
        lines = [l.strip() for l in result.output().splitlines() if l.strip()]
        where = ""
        for l in lines:
            m = re.search(r'line (\d+)', l)
            if m and "File" in l:
                where = " line " + m.group(1)
        msg = lines[-1] if lines else "exit %d" % result.returncode
        raise InputError("mpy-cross -march=%s failed on %s%s: %s" % (arch, label, where, msg),
                         detail="\n".join(lines))


def build(board, out_dir, root=None, boards_dir=None, progress=None, source_lines=False):
    """Compile the firmware for `board` into out_dir (device layout).
    Returns [BuildItem] sorted by device path."""
    root = root or REPO_ROOT
    if boards_dir is None:
        boards_dir = os.path.join(root, "boards")
    prof_path, _, profile = boards.load_profile(board.name, boards_dir)
    if profile.get("arch") not in (None, board.mpy_arch):
        raise InputError("board profile %s says arch %r but %s needs %r"
                         % (prof_path, profile.get("arch"), board.name, board.mpy_arch))
    plan = source_plan(root)
    items = []
    check_dir = tempfile.mkdtemp(prefix="snakemesh-check-")
    try:
        for i, (src, dev, kind) in enumerate(plan):
            rel = os.path.relpath(src, root).replace(os.sep, "/")
            local = os.path.join(out_dir, dev.lstrip("/"))
            os.makedirs(os.path.dirname(local), exist_ok=True)
            if progress:
                progress(i + 1, len(plan), rel)
            if kind == "mpy":
                mpy_cross(src, local, board.mpy_arch, board_file_name(dev), source_lines, label=rel)
            else:
                # main.py ships as source, but must compile for the board too.
                mpy_cross(src, os.path.join(check_dir, "main.mpy"), board.mpy_arch, rel, source_lines)
                shutil.copyfile(src, local)
            items.append(BuildItem(dev, local, rel))
    finally:
        shutil.rmtree(check_dir, ignore_errors=True)
    local = os.path.join(out_dir, "profile.json")
    shutil.copyfile(prof_path, local)
    items.append(BuildItem("/profile.json", local, os.path.relpath(prof_path, root)))
    items.sort(key=lambda it: it.device_path)
    return items


# ----------------------------------------------------- board-side scripts ---
# Plain MicroPython (and CPython) code run with `mpremote exec`. `root` is ""
# on a board; tests run the same scripts under the unix port with a temp dir.

def script_prepare(dirs, remove, root=""):
    return ("import os\nR=%r\n"
            "for d in %r:\n"
            " try:\n  os.mkdir(R+d)\n except OSError:\n  pass\n"
            "for p in %r:\n"
            " try:\n  os.remove(R+p)\n except OSError:\n  pass\n"
            % (root, tuple(dirs), tuple(remove)))


def script_sizes(paths, root=""):
    return ("import os\nR=%r\n"
            "def s(p):\n try:\n  return os.stat(R+p)[6]\n except OSError:\n  return -1\n"
            "print('SMLS', ' '.join([str(s(p)) for p in %r]))\n" % (root, tuple(paths)))


def script_heap():
    return ("import gc\ngc.collect()\nprint('SMHEAP', gc.mem_free(), gc.mem_alloc())\n")


def parse_marker(stdout, marker):
    for line in stdout.splitlines():
        if line.startswith(marker + " ") or line == marker:
            return line[len(marker):].strip()
    return None


def needed_dirs(device_paths):
    dirs = set()
    for p in device_paths:
        parts = p.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/" + "/".join(parts[:i]))
    return sorted(dirs, key=lambda d: (d.count("/"), d))


# ------------------------------------------------------------------ deploy ---

def check_heap(mp, board, log=print):
    """Refuse (one line) a board whose free heap cannot hold the firmware as
    .mpy (boards.HEAP_NEED); warn when it leaves less than 35 % free.
    mpremote runs this in a fresh interpreter (raw REPL), before main.py."""
    result = mp.exec_(script_heap(), "reading the free heap")
    out = (parse_marker(result.stdout, "SMHEAP") or "").split()
    try:
        free, used = int(out[0]), int(out[1])
    except (IndexError, ValueError):
        raise DeviceError("cannot read the free heap of the board on %s (unexpected answer)" % mp.port,
                          detail=result.stdout[-2000:])
    need = boards.HEAP_NEED.get(board.name, {})
    mpy = need.get("mpy")
    if mpy is None:
        return free
    kb = lambda n: (n + 512) // 1024  # noqa: E731
    if free < mpy:
        if board.variant:   # a profile for an image variant (PSRAM): no custom image to build
            how = ".mpy"
            todo = ("%s needs the %s image of MicroPython (and a board with PSRAM), or another --board: %s"
                    % (board.name, board.image_name(), boards.FIRST_BOARD_GUIDE))
        else:
            frozen = need.get("frozen")
            how = ".mpy on stock MicroPython"
            todo = ("build a custom image with it frozen in (make firmware-image BOARD=%s%s: %s) or use a "
                    "board with PSRAM" % (board.image, ", ~%d KB" % kb(frozen) if frozen else "",
                                          boards.FIRST_BOARD_GUIDE))
        raise DeviceError("the firmware does not fit %s's heap: it needs ~%d KB as %s, the board has %d KB "
                          "free; %s (--no-heap-check deploys anyway)" % (board.name, kb(mpy), how, kb(free), todo))
    total = free + used
    left = 100.0 * (free - mpy) / total if total else 0.0
    if left < 35.0:
        log("warning: the firmware leaves ~%d KB (%.0f %%) of the board's %d KB heap free (< 35 %%): "
            "a custom image with it frozen in leaves more" % (kb(free - mpy), left, kb(total)))
    return free


def read_manifest(mp):
    result = mp.run([["fs", "cat", ":" + MANIFEST]], "reading the deploy manifest", check=False)
    if result.returncode != 0:
        low = result.output().lower()
        if "no such file" in low or "enoent" in low:
            return {}
        raise mp.classify(result, "reading the deploy manifest")
    try:
        data = json.loads(result.stdout)
    except ValueError:
        print("warning: the board's %s is unreadable; uploading everything" % MANIFEST)
        return {}
    if not isinstance(data, dict):
        return {}
    return dict((k, v) for k, v in data.items() if isinstance(k, str) and isinstance(v, str))


def firmware_version(root=None):
    """VERSION (or __version__) from firmware/snake/__init__.py, if set."""
    path = os.path.join(root or REPO_ROOT, "firmware", "snake", "__init__.py")
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r'^(?:VERSION|__version__)\s*=\s*["\']([^"\']+)["\']', text, re.M)
    return m.group(1) if m else None


def _write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, sort_keys=True, separators=(",", ":"))


def upload(mp, items, old, tmp_dir, force=False, log=print):
    """Upload changed items; returns (changed, removed) lists of device paths."""
    new = dict((it.device_path, it.sha256) for it in items)
    changed = [it for it in items if force or old.get(it.device_path) != it.sha256]
    removed = sorted(p for p in old if p not in new and p != MANIFEST)
    if not changed and not removed and old == new:
        return [], []
    commands = []
    dirty = dict((k, v) for k, v in old.items() if k in new and k not in set(it.device_path for it in changed))
    if old and dirty != old:
        interim = os.path.join(tmp_dir, "manifest-interim.json")
        _write_json(interim, dirty)
        commands.append(["fs", "cp", "-f", interim, ":" + MANIFEST])
    commands.append(["exec", script_prepare(needed_dirs([it.device_path for it in changed]), removed)])
    for it in changed:
        commands.append(["fs", "cp", "-f", it.local_path, ":" + it.device_path])
    final = os.path.join(tmp_dir, "manifest.json")
    _write_json(final, new)
    commands.append(["fs", "cp", "-f", final, ":" + MANIFEST])
    total = sum(it.size for it in changed)
    log("uploading %d changed file(s), %d bytes; %d unchanged; %d to remove"
        % (len(changed), total, len(items) - len(changed), len(removed)))

    def on_line(line):
        if line.startswith("cp ") and MANIFEST not in line:
            log("  copying " + line.split()[-1].lstrip(":"))
    mp.run(commands, "uploading files", on_line=on_line)
    return [it.device_path for it in changed], removed


def verify(mp, items):
    paths = [it.device_path for it in items] + [MANIFEST]
    result = mp.exec_(script_sizes(paths), "verifying the files")
    out = parse_marker(result.stdout, "SMLS")
    sizes = (out or "").split()
    if len(sizes) != len(paths):
        raise DeviceError("verify failed on %s: unexpected listing from the board" % mp.port,
                          detail=result.stdout[-2000:])
    for it, s in zip(items, sizes):
        if int(s) < 0:
            raise DeviceError("verify failed on %s: %s is missing on the board" % (mp.port, it.device_path))
        if int(s) != it.size:
            raise DeviceError("verify failed on %s: %s has %s bytes on the board, expected %d "
                              "(redeploy with --force)" % (mp.port, it.device_path, s, it.size))
    if int(sizes[-1]) < 0:
        raise DeviceError("verify failed on %s: %s is missing" % (mp.port, MANIFEST))


def wait_console(port, boot_timeout, expect_version=None, expect_board=None, log=print):
    """After a reset: ask the node's console for `version` until it answers."""
    from host_tools.console_client import ConsoleClient, GarbageError, ReplBusyError
    deadline = time.monotonic() + boot_timeout
    client = None
    last = None
    try:
        while time.monotonic() < deadline:
            if client is None:
                try:
                    client = ConsoleClient(port, timeout=2.0).open()
                except DeviceError as e:       # native USB re-enumerating after reset
                    last = e
                    time.sleep(0.3)
                    continue
            try:
                reply = client.request("version", timeout=min(2.0, max(0.1, deadline - time.monotonic())))
                break
            except ReplBusyError:
                raise DeviceError("after the reset the board on %s is in the MicroPython REPL: main.py did not "
                                  "start snakemesh (see why with: mpremote connect %s repl, then Ctrl-D)"
                                  % (port, port))
            except (TimeoutError_, GarbageError) as e:   # still booting
                last = e
        else:
            raise TimeoutError_("the node on %s did not answer on its console within %g s after the reset%s"
                                % (port, boot_timeout, " (" + last.message + ")" if last else ""))
    finally:
        if client is not None:
            client.close()
    version = reply.get("version")
    if expect_version and version != expect_version:
        raise DeviceError("the node on %s runs firmware version %s, expected %s (the new files did not load?)"
                          % (port, version, expect_version))
    board = reply.get("board")
    if expect_board and board and board != expect_board:
        log("warning: the node reports board %s, deployed profile %s" % (board, expect_board))
    return reply


def register(subparsers):
    b = subparsers.add_parser(
        "build-mpy", help="compile firmware/ and lib/ for a board (mpy-cross) into a folder",
        description="Compile firmware/ and lib/ with mpy-cross for the board's architecture, "
                    "laid out like the board's filesystem.")
    b.add_argument("--board", required=True, choices=boards.board_names())
    b.add_argument("--out", required=True, help="output folder")
    b.add_argument("--source-lines", action="store_true",
                   help="keep line numbers in the .mpy files (tracebacks show lines; costs heap)")
    b.add_argument("--root", default=None, help=argparse_suppress())
    boards.add_verbose(b)
    b.set_defaults(func=run_build)

    p = subparsers.add_parser(
        "deploy", help="copy the firmware to a board running MicroPython (mpy-cross + mpremote)",
        description="Compile and upload the snakemesh firmware to a board running stock MicroPython; "
                    "only changed files are uploaded. Then verify, reset and check the node's console.")
    p.add_argument("--port", required=True, help="serial port (device path or pyserial URL)")
    p.add_argument("--board", required=True, choices=boards.board_names())
    p.add_argument("--force", action="store_true", help="upload every file, even unchanged ones")
    p.add_argument("--no-reset", action="store_true", help="do not reset the board afterwards (no console check)")
    p.add_argument("--no-console-check", action="store_true",
                   help="reset, but do not wait for the node's console to answer")
    p.add_argument("--timeout", type=float, default=DEFAULT_TOOL_TIMEOUT,
                   help="seconds each mpremote step may take (default %(default)s)")
    p.add_argument("--boot-timeout", type=float, default=DEFAULT_BOOT_TIMEOUT,
                   help="seconds to wait for the node's console after the reset (default %(default)s)")
    p.add_argument("--source-lines", action="store_true",
                   help="keep line numbers in the .mpy files (tracebacks show lines; costs heap)")
    p.add_argument("--no-heap-check", action="store_true",
                   help="deploy even when the board's free heap is below what the firmware needs as .mpy")
    p.add_argument("--root", default=None, help=argparse_suppress())
    boards.add_verbose(p)
    p.set_defaults(func=run_deploy)


def argparse_suppress():
    import argparse
    return argparse.SUPPRESS


def _progress(i, n, rel):
    sys.stdout.write("\rcompiling %d/%d %-50s" % (i, n, rel[:50]))
    sys.stdout.flush()
    if i == n:
        sys.stdout.write("\n")


def run_build(args):
    board = boards.get_board(args.board)
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        raise InputError("cannot create %s: %s" % (args.out, e.strerror or e))
    items = build(board, args.out, root=args.root, progress=_progress if sys.stdout.isatty() else None,
                  source_lines=args.source_lines)
    for it in items:
        print("%8d  %s" % (it.size, it.device_path))
    print("built %d files (%d bytes) for %s (-march=%s) in %s"
          % (len(items), sum(it.size for it in items), board.name, board.mpy_arch, args.out))
    return 0


def run_deploy(args):
    board = boards.get_board(args.board)
    boards.precheck_port(args.port)
    tmp = tempfile.mkdtemp(prefix="snakemesh-deploy-")
    try:
        out = os.path.join(tmp, "build")
        print("compiling firmware for %s (mpy-cross -march=%s)" % (board.name, board.mpy_arch), flush=True)
        items = build(board, out, root=args.root, progress=_progress if sys.stdout.isatty() else None,
                      source_lines=args.source_lines)
        mp = Mpremote(args.port, timeout=args.timeout)
        if not args.no_heap_check:
            check_heap(mp, board)
        old = read_manifest(mp)
        changed, removed = upload(mp, items, old, tmp, force=args.force)
        if not changed and not removed:
            print("all %d files are up to date on the board" % len(items))
        print("verifying %d files on the board" % len(items), flush=True)
        verify(mp, items)
        if args.no_reset:
            print("deployed (board not reset)")
            return 0
        print("resetting the board", flush=True)
        mp.run([["reset"]], "resetting the board")
        if args.no_console_check:
            print("deployed")
            return 0
        print("waiting for the node's console", flush=True)
        reply = wait_console(args.port, args.boot_timeout, firmware_version(args.root), board.name)
        print("deployed: node on %s answers, snakemesh %s on %s (%s)"
              % (args.port, reply.get("version"), reply.get("board"), reply.get("platform")))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
