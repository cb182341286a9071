"""Command-line options every process-mesh entry point shares (`snakemesh
mesh`, `python -m host_tools.procmesh.soak`): checked before any node
starts, each failure one line. Light on imports: the CLI loads it to
register its commands."""
import os


def heapsize_arg(s):
    """argparse type of --heapsize: bytes, or a number with K or M (as -X heapsize= takes)."""
    import argparse
    import re
    if not re.match(r"^[1-9][0-9]*[KkMm]?$", s or ""):
        raise argparse.ArgumentTypeError("expected a size like 110K, 2M or 65536, got %r" % s)
    return s


def micropython_arg(path):
    """The --micropython binary, checked before any node starts (one line)."""
    from host_tools.errors import InputError
    if path is None:
        return None
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise InputError("--micropython %s: no such executable (build one with `make mp32`)" % path)
    return os.path.abspath(path)
