"""Compare two `snakemesh analyze` output folders: are they the same analysis?

    .venv/bin/python bench/analyze_compare.py A B

Equal means: summary.json equal apart from the fields that describe the run
rather than the data (TIMING_FIELDS), nodes.json equal, every driver-side
Parquet file (nodes.parquet, convergence.parquet, ...) equal row for row
with the same schema, the Spark-written tables (telemetry/, probes/, with
their day/kind partitions) equal as multisets of rows with the same schema
(Spark's file split and row order within a partition are not part of the
result), and rejects/ equal as a multiset of lines. Prints the first
differences and exits 1 if there are any; exit 0 if equal. A change to the
pipeline's plan is checked with this against the output of the code before
the change on the same input.
"""
import glob
import json
import os
import sys

# summary.json fields that describe how the run went, not what it found
TIMING_FIELDS = ("timings_s", "jvm_cpu_s", "wall_time_s", "spark_jobs", "out")
SPARK_TABLES = ("telemetry", "probes")


def _json(path):
    with open(path) as f:
        return json.load(f)


def _diff(a, b, where, out, limit=20):
    if len(out) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append("%s.%s: only in %s" % (where, k, "A" if k in a else "B"))
            else:
                _diff(a[k], b[k], "%s.%s" % (where, k), out, limit)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append("%s: %d against %d items" % (where, len(a), len(b)))
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, "%s[%d]" % (where, i), out, limit)
    elif a != b or type(a) is not type(b):
        out.append("%s: %r against %r" % (where, a, b))


def _table(path, partitioned):
    import pyarrow.dataset as ds
    if partitioned:
        t = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    else:
        import pyarrow.parquet as pq
        t = pq.read_table(path)
    return t


def _rows(t):
    cols = t.column_names
    data = t.to_pydict()
    return [tuple(json.dumps(data[c][i], sort_keys=True, default=repr) for c in cols) for i in range(t.num_rows)]


def compare(a, b):
    diffs = []
    sa, sb = _json(os.path.join(a, "summary.json")), _json(os.path.join(b, "summary.json"))
    for k in TIMING_FIELDS:
        sa.pop(k, None)
        sb.pop(k, None)
    _diff(sa, sb, "summary", diffs)
    _diff(_json(os.path.join(a, "nodes.json")), _json(os.path.join(b, "nodes.json")), "nodes.json", diffs)
    names_a = sorted(os.path.basename(p) for p in glob.glob(os.path.join(a, "*.parquet")))
    names_b = sorted(os.path.basename(p) for p in glob.glob(os.path.join(b, "*.parquet")))
    if names_a != names_b:
        diffs.append("driver tables: %s against %s" % (names_a, names_b))
    checked = []
    for name in names_a:
        if name not in names_b:
            continue
        ta, tb = _table(os.path.join(a, name), False), _table(os.path.join(b, name), False)
        if ta.schema != tb.schema:
            diffs.append("%s: schema %s against %s" % (name, ta.schema, tb.schema))
        elif _rows(ta) != _rows(tb):
            diffs.append("%s: rows differ (%d against %d rows)" % (name, ta.num_rows, tb.num_rows))
        checked.append("%s (%d rows)" % (name, ta.num_rows))
    for name in SPARK_TABLES:
        pa_, pb_ = os.path.join(a, name), os.path.join(b, name)
        parts_a = sorted(os.path.relpath(d, pa_) for d in glob.glob(os.path.join(pa_, "**", "*=*"), recursive=True))
        parts_b = sorted(os.path.relpath(d, pb_) for d in glob.glob(os.path.join(pb_, "**", "*=*"), recursive=True))
        if parts_a != parts_b:
            diffs.append("%s/: partitions %s against %s" % (name, parts_a, parts_b))
            continue
        ta, tb = _table(pa_, True), _table(pb_, True)
        # the schema Spark wrote (without the partition columns, which come
        # from the folder names)
        fa = [pq_schema(f) for f in sorted(glob.glob(os.path.join(pa_, "**", "*.parquet"), recursive=True))]
        fb = [pq_schema(f) for f in sorted(glob.glob(os.path.join(pb_, "**", "*.parquet"), recursive=True))]
        if set(fa) != set(fb):
            diffs.append("%s/: file schemas differ" % name)
        if ta.schema != tb.schema:
            diffs.append("%s/: schema %s against %s" % (name, ta.schema, tb.schema))
        elif sorted(_rows(ta)) != sorted(_rows(tb)):
            diffs.append("%s/: rows differ (%d against %d rows)" % (name, ta.num_rows, tb.num_rows))
        checked.append("%s/ (%d rows, %d partitions)" % (name, ta.num_rows, len(parts_a)))
    ra = sorted(_lines(os.path.join(a, "rejects")))
    rb = sorted(_lines(os.path.join(b, "rejects")))
    if ra != rb:
        diffs.append("rejects/: %d against %d lines, or they differ" % (len(ra), len(rb)))
    checked.append("rejects/ (%d lines)" % len(ra))
    return diffs, checked


def pq_schema(path):
    import pyarrow.parquet as pq
    return str(pq.read_schema(path).remove_metadata())


def _lines(d):
    out = []
    for p in sorted(set(glob.glob(os.path.join(d, "*.json")) + glob.glob(os.path.join(d, "part-*")))):
        with open(p) as f:
            out.extend(line for line in f.read().splitlines() if line)
    return out


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.split("\n\n")[1].strip())
    diffs, checked = compare(sys.argv[1], sys.argv[2])
    if diffs:
        print("DIFFERENT:")
        for d in diffs:
            print("  " + d)
        raise SystemExit(1)
    print("equal: summary.json (without %s), nodes.json, %s" % ("/".join(TIMING_FIELDS), ", ".join(checked)))


if __name__ == "__main__":
    main()
