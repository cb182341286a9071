"""host_tools' simulator (sim/) and process mesh (procmesh/) import one way:
no import circles inside or between them, the simulator never imports the
process mesh, and the parts `Mesh` is assembled from (harness.py) never
import the harness or the runner above them. Read from the source (every
import, also those inside functions), so a lazy import cannot hide a
circle."""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("host_tools.sim", "host_tools.procmesh")
MESH_PARTS = ("nodes", "transport", "probing", "faults", "sampling", "virtual")


def modules():
    out = {}
    for pkg in PACKAGES:
        d = os.path.join(ROOT, *pkg.split("."))
        for f in sorted(os.listdir(d)):
            if f.endswith(".py"):
                name = pkg if f == "__init__.py" else pkg + "." + f[:-3]
                out[name] = os.path.join(d, f)
    return out


MODULES = modules()


def imports_of(path, known):
    """Modules of `known` that the file at `path` imports."""
    deps = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + ["%s.%s" % (node.module, a.name) for a in node.names]
        deps.update(n for n in names if n in known)
    return deps


def graph(mods=MODULES):
    g = {m: imports_of(p, mods) - {m} for m, p in mods.items()}
    for m in g:                 # a package's __init__ is not an edge worth following
        g[m] -= set(PACKAGES)
    return g


def cycles(g):
    found, state = [], {}

    def visit(m, stack):
        state[m] = 1
        stack.append(m)
        for d in sorted(g.get(m, ())):
            if state.get(d) == 1:
                found.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [])
    return found


def test_modules_are_found():
    assert "host_tools.sim.harness" in MODULES and "host_tools.procmesh.nodeproc" in MODULES
    assert all("host_tools.sim." + p in MODULES for p in MESH_PARTS)


def test_no_import_circles():
    assert cycles(graph()) == []


def test_circle_detection_finds_one():
    # the check above can fail: a made-up back edge from transport to harness
    g = graph()
    g["host_tools.sim.transport"] = g["host_tools.sim.transport"] | {"host_tools.sim.harness"}
    assert cycles(g)


def test_sim_does_not_import_the_process_mesh():
    g = graph()
    bad = {m: sorted(d for d in deps if d.startswith("host_tools.procmesh"))
           for m, deps in g.items() if m.startswith("host_tools.sim")}
    assert not any(bad.values()), bad


@pytest.mark.parametrize("part", MESH_PARTS)
def test_mesh_parts_import_nothing_above_them(part):
    deps = graph()["host_tools.sim." + part]
    assert not deps & {"host_tools.sim.harness", "host_tools.sim.runner"}, deps


def test_sim_and_procmesh_import_no_cli_code():
    # the CLI (host_tools.cli, host_tools.commands) imports them, not the reverse
    bad = []
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += ["%s imports %s" % (m, n) for n in names
                    if n == "host_tools.cli" or n.startswith("host_tools.commands")]
    assert not bad, bad
