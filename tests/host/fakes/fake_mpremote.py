"""Fake mpremote for tests (never used by production code): the board end of
`snakemesh deploy` and `snakemesh provision`.

Installed with SNAKEMESH_MPREMOTE="python fake_mpremote.py". The board's
filesystem is the directory $FAKE_MPREMOTE_ROOT. Every invocation appends
{"argv": [...]} as a JSON line to $FAKE_MPREMOTE_LOG.

Understood (like mpremote 1.29): `connect PORT` followed by commands joined
with `+`: fs cat|cp [-f]|ls|rm|mkdir, exec CODE, reset, soft-reset, resume.
`exec` runs the code with CPython, with `os` and `open` mapped into the
board directory; `import snake...` works only once /snake exists on the fake
board (it then loads the checkout's firmware/, as a deployed board would).

$FAKE_MPREMOTE_MODE:
    ok          normal
    noaccess    "failed to access PORT" (missing, busy or no permission)
    rawrepl     "could not enter raw repl" (a program that ignores Ctrl-C)
    hang        never finishes (to test the caller's timeout)
    disconnect  the board goes away after $FAKE_MPREMOTE_FAIL_AFTER copies
$FAKE_MPREMOTE_DROP: a board path whose upload is silently lost.
$FAKE_MPREMOTE_FROZEN: "1" for a custom image with the firmware frozen in:
`import snake...` works with no /snake on the board.
$FAKE_MPREMOTE_HEAP: "FREE,USED" bytes that `gc` reports in exec (default
a board with PSRAM: 4 MB free).
Errors print like mpremote: "mpremote: ..." on stderr, exit 1.
"""
import builtins
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


class Fail(Exception):
    pass


def dev(root, path):
    if path.startswith(":"):
        path = path[1:]
    if not path.startswith("/"):
        path = "/" + path
    full = os.path.normpath(os.path.join(root, path.lstrip("/")))
    if not (full == root or full.startswith(root + os.sep)):
        raise Fail("path outside the board: " + path)
    return full


def make_os_shim(root):
    import types
    shim = types.ModuleType("os")
    m = lambda p: dev(root, p)  # noqa: E731
    shim.stat = lambda p: tuple(os.stat(m(p)))
    shim.mkdir = lambda p: os.mkdir(m(p))
    shim.remove = lambda p: os.remove(m(p))
    shim.rename = lambda a, b: os.rename(m(a), m(b))
    shim.listdir = lambda p="/": sorted(os.listdir(m(p)))
    shim.urandom = os.urandom
    return shim


def make_gc_shim():
    import types
    free, used = (int(x) for x in os.environ.get("FAKE_MPREMOTE_HEAP", "4000000,20000").split(","))
    shim = types.ModuleType("gc")
    shim.collect = lambda: None
    shim.mem_free = lambda: free
    shim.mem_alloc = lambda: used
    return shim


def run_exec(root, code):
    shim = make_os_shim(root)
    gc_shim = make_gc_shim()
    real_import = builtins.__import__

    def fake_import(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "os":
            return shim
        if name == "gc":
            return gc_shim
        if name == "snake" or name.startswith("snake."):
            if not os.path.isdir(os.path.join(root, "snake")) and os.environ.get("FAKE_MPREMOTE_FROZEN") != "1":
                raise ImportError("no module named '%s'" % name)
        return real_import(name, globals, locals, fromlist, level)

    def fake_open(p, mode="r", *a, **k):
        return builtins.open(dev(root, p), mode, *a, **k)

    sys.path[:0] = [os.path.join(REPO, "firmware"), os.path.join(REPO, "lib")]
    b = dict(vars(builtins))
    b["__import__"] = fake_import
    b["open"] = fake_open
    try:
        exec(compile(code, "<stdin>", "exec"), {"__builtins__": b, "__name__": "__main__"})
    except Exception:
        import traceback
        # mpremote prints the board's traceback on stdout and exits 1
        sys.stdout.write(traceback.format_exc().replace(HERE, "<board>"))
        sys.stdout.flush()
        raise SystemExit(1)


def fs(root, args, state):
    args = [a for a in args if a not in ("-f", "--force", "-r", "--recursive", "-v", "--verbose")]
    cmd, paths = args[0], args[1:]
    if cmd == "cat":
        p = dev(root, paths[0])
        if not os.path.isfile(p):
            raise Fail("cat: %s: No such file or directory." % paths[0].lstrip(":"))
        with open(p, "rb") as f:
            sys.stdout.buffer.write(f.read())
        sys.stdout.flush()
    elif cmd == "cp":
        dst = paths[-1]
        for src in paths[:-1]:
            print("cp %s %s" % (src, dst))
            sys.stdout.flush()
            state["copies"] += 1
            fail_after = int(os.environ.get("FAKE_MPREMOTE_FAIL_AFTER", "-1"))
            if os.environ.get("FAKE_MPREMOTE_MODE") == "disconnect" and state["copies"] > fail_after:
                raise Fail("Error with transport:\ncould not read from the device: [Errno 5] Input/output error")
            target = dev(root, dst)
            if not os.path.isdir(os.path.dirname(target)):
                raise Fail("cp: %s: No such file or directory." % dst.lstrip(":"))
            if os.environ.get("FAKE_MPREMOTE_DROP") == dst.lstrip(":"):
                continue
            with open(src, "rb") as fi, open(target, "wb") as fo:
                fo.write(fi.read())
    elif cmd == "ls":
        for p in paths or [":/"]:
            d = dev(root, p)
            print("ls %s" % p)
            for n in sorted(os.listdir(d)):
                full = os.path.join(d, n)
                print("%12d %s%s" % (0 if os.path.isdir(full) else os.path.getsize(full), n,
                                      "/" if os.path.isdir(full) else ""))
    elif cmd == "rm":
        for p in paths:
            try:
                os.remove(dev(root, p))
            except OSError:
                raise Fail("rm: %s: No such file or directory." % p.lstrip(":"))
    elif cmd == "mkdir":
        for p in paths:
            try:
                os.mkdir(dev(root, p))
            except OSError:
                raise Fail("mkdir: %s: File exists." % p.lstrip(":"))
    else:
        raise Fail("unsupported fs command in the fake: " + cmd)


def main(argv):
    log = os.environ.get("FAKE_MPREMOTE_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"argv": argv}) + "\n")
    root = os.path.abspath(os.environ.get("FAKE_MPREMOTE_ROOT", "."))
    mode = os.environ.get("FAKE_MPREMOTE_MODE", "ok")
    if len(argv) < 2 or argv[0] != "connect":
        sys.stderr.write("fake mpremote: expected `connect PORT ...`\n")
        return 2
    port = argv[1]
    if mode == "noaccess":
        sys.stderr.write("mpremote: failed to access %s (it may be in use by another program)\n" % port)
        return 1
    if mode == "hang":
        import time
        time.sleep(60)
        return 1
    if mode == "rawrepl":
        sys.stderr.write("mpremote: could not enter raw repl\n")
        return 1
    chain = [[]]
    for a in argv[2:]:
        if a == "+":
            chain.append([])
        else:
            chain[-1].append(a)
    state = {"copies": 0}
    try:
        for cmd in chain:
            if not cmd:
                continue
            if cmd[0] == "fs":
                fs(root, cmd[1:], state)
            elif cmd[0] in ("cat", "cp", "ls", "rm", "mkdir"):
                fs(root, cmd, state)
            elif cmd[0] == "exec":
                run_exec(root, cmd[-1])
            elif cmd[0] in ("reset", "soft-reset", "resume"):
                pass
            else:
                raise Fail("'%s' is not a command" % cmd[0])
    except Fail as e:
        sys.stdout.flush()
        sys.stderr.write("mpremote: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
