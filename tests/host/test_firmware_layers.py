# The firmware's layers (firmware/snake/__init__.py): imports point one way,
# core <- runtime <- cold code, with no import circles, and host-only code
# (snakehost) reached only by name. Read from the source with ast
# (tools/fwmap.py), so the rules hold for every module added later too; the
# same reading generates docs/reference/INTERFACES.md's module map.
import ast
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FW = os.path.join(ROOT, "firmware")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import fwmap  # noqa: E402
from fwmap import graph, violations  # noqa: E402


def test_firmware_imports_point_one_way_without_circles():
    files, edges, loads, cold = graph()
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
    assert "cold('snake.runtime.nosuch') names no module under firmware/ or lib/" in violations(str(fw))


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
    ("snake/datagram_cold.py", "snake/datagram.py", {"_OK", "_G_FAILED_NO_MEMORY", "_G_NO_MEMORY", "_O_DUE",
                                                     "_O_RUN", "_SN", "_MN"}),
    # two cold modules: cmds.py reads what telesink.py keeps on the node
    ("snake/runtime/cmds.py", "snake/runtime/telesink.py", {"_T_SINK", "_T_SENT", "_T_BYTES", "_T_DEFERRED",
                                                            "_T_FAILED", "_T_TOO_BIG", "_T_NO_SINK"}),
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


def test_interfaces_page_lists_every_firmware_module_as_it_is():
    with open(fwmap.PAGE) as f:
        text = f.read()
    assert fwmap.render(text) == text, "run: python tools/fwmap.py"
    for mod in fwmap.module_files():
        assert "| `%s` (" % mod in text, mod


def test_interfaces_page_goes_stale_when_a_module_changes(tmp_path):
    # a new module under firmware/ changes the map, so the check above bites
    fw = _copy_tree(tmp_path)
    (fw / "snake" / "extra.py").write_text("# An extra module.\nfrom snake import wire\n")
    with open(fwmap.PAGE) as f:
        text = f.read()
    new = fwmap.render(text, str(fw))
    assert new != text and "| `snake.extra` (firmware/snake/extra.py) | An extra module. | hot | `snake.wire` |" in new


def test_router_copy_of_the_trace_probe_format_agrees_with_probe():
    # the core cannot import the runtime's probe.py, so router.py recognises
    # a trace probe by copies of its length and kind
    from snake.runtime import probe
    r = _consts(os.path.join(FW, "snake/router.py"))
    assert r["_TRACE_KIND"] == probe.TRACE and r["_TRACE_LEN"] == probe.PAYLOAD_LEN
