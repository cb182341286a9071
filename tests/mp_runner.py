# Runs one firmware test module under MicroPython (or CPython) and prints one
# result line per test: "@@MP <name> ok" or "@@MP <name> fail <message>".
# Used by tests/mp_plugin.py; kept free of CPython-only modules.
import sys

def main():
    root = sys.argv[1]
    modname = sys.argv[2]
    only = sys.argv[3:]
    for p in ("/tests/firmware", "/lib", "/firmware"):
        sys.path.insert(0, root + p)
    try:
        mod = __import__(modname)
    except Exception as e:
        print("@@MP __import__ fail", _fmt(e))
        return
    names = only or [n for n in dir(mod) if n.startswith("test_")]
    for n in sorted(names):
        f = getattr(mod, n, None)
        if f is None:
            print("@@MP", n, "fail", "not found under micropython")
            continue
        try:
            f()
            print("@@MP", n, "ok")
        except Exception as e:
            print("@@MP", n, "fail", _fmt(e))

def _fmt(e):
    try:
        import io
        s = io.StringIO()
        sys.print_exception(e, s)
        return s.getvalue().replace("\n", "\\n")
    except Exception:
        return repr(e)

main()
