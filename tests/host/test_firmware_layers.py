# The firmware's layers (firmware/snake/__init__.py): imports point one way,
# core <- runtime <- cold code, with no import circles, and host-only code
# (snakehost) reached only by name. Read from the source with ast, so the
# rules hold for every module added later too.
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FW = os.path.join(ROOT, "firmware")


def module_files(fw=FW):
    """{module name: path} of every Python file under firmware/."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(fw):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, fn), fw)[:-3].replace(os.sep, ".")
            if rel.endswith(".__init__"):
                rel = rel[:-len(".__init__")]
            out[rel] = os.path.join(dirpath, fn)
    return out


def read_imports(path, known):
    """(static imports, names given to a cold() call) of one file. An import
    anywhere in the file counts (function-level imports too); `from pkg
    import name` is an import of pkg.name when that is a module."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    static, cold = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                static.add(a.name)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "%s: relative import" % path
            for a in node.names:
                sub = node.module + "." + a.name
                static.add(sub if sub in known else node.module)
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
            if name == "cold":
                assert len(node.args) == 1 and isinstance(node.args[0], ast.Constant), \
                    "%s line %d: cold() takes the module's name as a string" % (path, node.lineno)
                cold.add(node.args[0].value)
    return static, cold


def layer(mod):
    if mod == "main":
        return "main"
    if mod == "snakehost" or mod.startswith("snakehost."):
        return "host"
    if mod.startswith("snake.runtime"):
        return "runtime"
    return "core"


def graph(fw=FW):
    files = module_files(fw)
    edges, cold = {}, set()
    for mod, path in files.items():
        static, c = read_imports(path, files)
        # only firmware modules are nodes (asyncio, binascii ... are not)
        edges[mod] = sorted(m for m in static if m in files)
        cold |= c
    return files, edges, cold


def violations(fw=FW):
    """Every broken rule, one line each (empty: the layers hold)."""
    files, edges, cold = graph(fw)
    bad = []
    for name in sorted(cold):
        if name not in files:
            bad.append("cold(%r) names no module under firmware/" % name)
    for mod in sorted(edges):
        for dep in edges[mod]:
            if dep in cold:
                bad.append("%s imports cold module %s (only platform.cold(%r) may load it)"
                           % (mod, dep, dep))
            if layer(dep) == "host" and layer(mod) != "host":
                bad.append("%s imports host-only %s (firmware reaches it only through platform.cold)"
                           % (mod, dep))
            if layer(mod) == "core" and layer(dep) in ("runtime", "main"):
                bad.append("core module %s imports %s module %s" % (mod, layer(dep), dep))
            if layer(mod) == "runtime" and layer(dep) == "main":
                bad.append("runtime module %s imports main" % mod)
        if mod == "snake.platform" and edges[mod]:
            bad.append("snake.platform imports %s (it is the bottom layer)" % ", ".join(edges[mod]))
    for c in circles(edges):
        bad.append("import circle: " + " -> ".join(c + [c[0]]))
    return bad


def circles(edges):
    """Strongly connected components with more than one module (or a module
    importing itself), by Tarjan's algorithm."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_firmware_imports_point_one_way_without_circles():
    files, edges, cold = graph()
    # the rules have something to bite on: the layers and the cold halves exist
    assert {"snake.router", "snake.runtime.node", "snakehost.wire_host", "main"} <= set(files)
    assert {"snake.runtime.boot", "snake.runtime.cmds", "snake.runtime.probing",
            "snake.runtime.ble_cold", "snake.report", "snake.crypto_backends"} <= cold
    assert violations() == []


def _copy_tree(tmp_path):
    import shutil
    dst = tmp_path / "firmware"
    shutil.copytree(FW, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


@pytest.mark.parametrize("where,line,expect", [
    ("snake/router.py", "from snake.runtime import node", "core module snake.router imports runtime"),
    ("snake/wire.py", "from snakehost import wire_host", "imports host-only snakehost.wire_host"),
    ("snake/runtime/console.py", "from snake.runtime import cmds", "imports cold module snake.runtime.cmds"),
    ("snake/telemetry.py", "from snake import report", "imports cold module snake.report"),
    ("snake/tables.py", "from snake import router", "import circle"),
])
def test_the_layer_check_fails_on_a_bad_import(tmp_path, where, line, expect):
    # the same check on a copy of firmware/ with one bad import added
    fw = _copy_tree(tmp_path)
    p = fw / where
    p.write_text(p.read_text() + "\n\ndef _bad():\n    " + line + "\n")
    got = violations(str(fw))
    assert any(expect in v for v in got), got


def test_cold_call_must_name_a_module(tmp_path):
    fw = _copy_tree(tmp_path)
    p = fw / "snake" / "runtime" / "probe.py"
    p.write_text(p.read_text() + '\n\ndef _bad():\n    platform.cold("snake.runtime.nosuch")\n')
    assert "cold('snake.runtime.nosuch') names no module under firmware/" in violations(str(fw))


def _consts(path):
    # NAME = const(value) at module level
    with open(path) as f:
        tree = ast.parse(f.read())
    out = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "const"):
            out[node.targets[0].id] = ast.literal_eval(node.value.args[0])
    return out


@pytest.mark.parametrize("cold,hot,shared", [
    ("snake/runtime/ble_cold.py", "snake/runtime/ble.py", {"_N_CANDIDATES", "_FREE", "_CENTRAL"}),
    ("snake/runtime/probing.py", "snake/runtime/probe.py", {"_SLOTS"}),
])
def test_cold_halves_copy_their_hot_halfs_constants_exactly(cold, hot, shared):
    # a const() with a leading underscore is no module attribute on
    # MicroPython, so a cold half keeps a copy: every copy must agree
    c = _consts(os.path.join(FW, cold))
    h = _consts(os.path.join(FW, hot))
    assert shared <= set(c) & set(h)
    for name in sorted(set(c) & set(h)):
        assert c[name] == h[name], (name, cold, c[name], hot, h[name])


def test_probe_counter_count_agrees():
    # probing.py sizes Prober.stats by _STATS; probe.py indexes it by _P_*,
    # report.PROBE_STATS names it
    from snake import report
    c = _consts(os.path.join(FW, "snake/runtime/probing.py"))
    h = _consts(os.path.join(FW, "snake/runtime/probe.py"))
    p = sorted(v for k, v in h.items() if k.startswith("_P_"))
    assert p == list(range(c["_STATS"])) and len(report.PROBE_STATS) == c["_STATS"]
