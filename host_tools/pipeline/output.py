"""Output folders that appear only when complete.

Everything is written into a hidden sibling `.NAME.partial-PID` and renamed
to NAME at the end, so an interrupted or failed run never leaves something
that looks like a finished analysis. An existing NAME is replaced only if it
is an earlier analysis (it has summary.json) or empty.
"""
import json
import os
import shutil

from host_tools.errors import InputError

MARKER = "summary.json"


def is_analysis_dir(path):
    return os.path.isfile(os.path.join(path, MARKER))


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:         # another user's process: alive
        return True
    return True


def clean_stale(parent, name):
    """Remove the `.NAME.partial-PID` / `.NAME.old-PID` folders in `parent`
    that a run which is gone left behind (killed, or interrupted before it
    could clean up); those of a running process stay."""
    prefix = "." + name + "."
    try:
        entries = os.listdir(parent)
    except OSError:
        return
    for e in entries:
        if not e.startswith(prefix):
            continue
        kind, _, pid = e[len(prefix):].rpartition("-")
        if kind in ("partial", "old") and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(parent, e), ignore_errors=True)


class AtomicDir(object):
    def __init__(self, final, replace_if=is_analysis_dir, what="output folder"):
        if "://" in final:
            raise InputError("%s: %s must be a local (or mounted) path" % (final, what))
        self.final = os.path.abspath(final)
        if os.path.exists(self.final):
            if not os.path.isdir(self.final):
                raise InputError("%s: exists and is not a folder" % final)
            if os.listdir(self.final) and not replace_if(self.final):
                raise InputError("%s: folder exists and is not a snakemesh analysis; refusing to overwrite it" % final)
        parent = os.path.dirname(self.final)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as e:
            raise InputError("%s: cannot create (%s)" % (parent, e.strerror or e))
        if not os.access(parent, os.W_OK):
            raise InputError("%s: folder is not writable" % parent)
        clean_stale(parent, os.path.basename(self.final))
        self.tmp = os.path.join(parent, ".%s.partial-%d" % (os.path.basename(self.final), os.getpid()))
        if os.path.exists(self.tmp):
            shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def commit(self):
        old = None
        if os.path.exists(self.final):
            old = os.path.join(os.path.dirname(self.final),
                               ".%s.old-%d" % (os.path.basename(self.final), os.getpid()))
            os.rename(self.final, old)
        os.rename(self.tmp, self.final)
        if old:
            shutil.rmtree(old, ignore_errors=True)
        return self.final

    def abort(self):
        shutil.rmtree(self.tmp, ignore_errors=True)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True, default=_json_default)
        f.write("\n")
    os.replace(tmp, path)


def _json_default(o):
    try:
        import numpy as np
        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.floating):
            return float(o)
    except ImportError:
        pass
    raise TypeError("not JSON serialisable: %r" % (o,))


_PA_TYPES = {"str": "string", "int": "int64", "float": "float64", "bool": "bool"}


def write_table(path, rows, columns):
    """Write a small driver-side table (list of dicts) as one Parquet file.
    columns: list of (name, type) with type in str/int/float/bool."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    fields = [pa.field(n, pa.type_for_alias(_PA_TYPES[t])) for n, t in columns]
    schema = pa.schema(fields)
    arrays = []
    for n, t in columns:
        vals = [r.get(n) for r in rows]
        if t == "float":
            vals = [None if v is None else float(v) for v in vals]
        elif t == "int":
            vals = [None if v is None else int(v) for v in vals]
        arrays.append(pa.array(vals, type=schema.field(n).type))
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), path)
