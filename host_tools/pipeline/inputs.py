"""Resolve `analyze` inputs (files, folders, globs) to telemetry files and the
run's side files, and reject unusable ones before Spark starts.

Local paths are expanded here (folders recursively, globs with `glob`). Each
candidate file's head is sniffed:

* binary data or a corrupt gzip file is a clear error, not thousands of
  rejected lines;
* a file whose head is not telemetry (a topology, `truth.json`, a README, a
  pretty-printed JSON document) is never read as telemetry: found in a folder
  it is skipped (and listed), named on the command line it is an error.

Side files: the project's tools write telemetry next to files that describe
the run: `snakemesh sim` writes topology.txt and truth.json, `snakemesh mesh`
and the demo write topology.txt and nodes.json. They are picked up from the
folders that hold the telemetry (names for the nodes, a topology when the
telemetry has none, the simulator's own ground truth).

Paths with a URI scheme (`hdfs://`, `s3a://`...) are passed to Spark
unchanged; `file://` URIs are local paths.
"""
import glob
import gzip
import json
import os
import re
import zlib

from host_tools.errors import InputError

TELEMETRY_SUFFIXES = (".jsonl", ".ndjson", ".json", ".log", ".txt")
COMPRESSED_SUFFIXES = (".gz",)
SIDE_FILES = ("topology.txt", "truth.json", "nodes.json")
SNIFF_BYTES = 8192
_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_TELEMETRY_HINT = re.compile(rb'"(v|kind)"\s*:')


def is_uri(p):
    return bool(_URI.match(p))


def _is_telemetry_name(name):
    n = name.lower()
    if n.endswith(COMPRESSED_SUFFIXES):
        n = n[: n.rfind(".")]
    return n.endswith(TELEMETRY_SUFFIXES)


def _is_analysis_output(d):
    return os.path.exists(os.path.join(d, "summary.json")) and (
        os.path.isdir(os.path.join(d, "telemetry")) or os.path.isdir(os.path.join(d, "states")))


def _walk(folder):
    found = []
    for root, dirs, files in os.walk(folder):
        # skip hidden folders and earlier `analyze` outputs (their rejects are JSON lines)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                         and not _is_analysis_output(os.path.join(root, d)))
        for f in sorted(files):
            if not f.startswith(".") and _is_telemetry_name(f):
                found.append(os.path.join(root, f))
    return found


def _head(path):
    """The first SNIFF_BYTES of a file (decompressed for gzip). Raises
    InputError for an unreadable or corrupt file."""
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as e:
        raise InputError("%s: cannot read (%s)" % (path, e.strerror or e))
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as g:
                head = g.read(SNIFF_BYTES)
                while g.read(1 << 20):  # a truncated gzip stream fails here, not in Spark
                    pass
        except (OSError, EOFError, zlib.error) as e:
            raise InputError("%s: corrupt or truncated gzip file (%s)" % (path, e))
    return head


def sniff(path):
    """Raise InputError if `path` is binary data or an unreadable gzip file;
    else return its head."""
    head = _head(path)
    if b"\x00" in head:
        raise InputError("%s: binary data, not telemetry JSON lines" % path)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:  # a multi-byte char cut by the sniff window is fine
            raise InputError("%s: binary data, not telemetry JSON lines (invalid UTF-8)" % path)
    return head


def classify(head):
    """'console' (a console capture: `@sm ` lines), 'telemetry' (JSON lines
    that look like telemetry records), or None (not telemetry).

    A line counts as telemetry-like if it starts with `{"` and either parses
    as a JSON object with `v` or `kind`, or is cut (by the sniff window or
    truncation) and mentions `"v":` or `"kind":`, or is a very long first line
    (a big record such as a simulator's `topology` record, keys sorted, whose
    `kind` comes after its edges). A pretty-printed JSON document starts with
    a lone `{` and is not telemetry."""
    lines = head.splitlines()
    complete = lines if head.endswith((b"\n", b"\r")) else lines[:-1]
    cut = None if head.endswith((b"\n", b"\r")) or not lines else lines[-1]
    if any(line.lstrip().startswith(b"@sm ") for line in lines):
        return "console"
    seen = False
    for line in complete:
        s = line.strip()
        if not s:
            continue
        seen = True
        if not s.startswith(b'{"'):
            continue
        try:
            obj = json.loads(s)
        except ValueError:
            if _TELEMETRY_HINT.search(s):
                return "telemetry"     # a malformed or truncated record
            continue
        if isinstance(obj, dict) and ("v" in obj or "kind" in obj):
            return "telemetry"
    if cut is not None:
        s = cut.strip()
        if s.startswith(b'{"') and (_TELEMETRY_HINT.search(s) or not seen):
            return "telemetry"
    return None


def is_console_capture(path):
    """A console capture has `@sm ` lines (docs/reference/INTERFACES.md, console
    protocol) within its first SNIFF_BYTES."""
    try:
        return classify(_head(path)) == "console"
    except InputError:
        return False


def _what(path, head):
    name = os.path.basename(path).lower()
    if name == "topology.txt":
        return "a topology (pass it with --topology)"
    if name in ("truth.json", "nodes.json"):
        return "a run description written by snakemesh sim/mesh (it is read from beside the telemetry)"
    s = head.lstrip()
    if s.startswith(b"{") or s.startswith(b"["):
        return "a JSON document, not JSON lines of telemetry records"
    if not s:
        return "empty"
    return "no telemetry records (JSON lines with `v` and `kind`) or console `@sm ` lines in its first %d KB" % (
        SNIFF_BYTES // 1024)


class Resolved(object):
    """files: local telemetry files (absolute); remote: URIs; console: the
    files that are console captures; side: {name: [paths]} of side files
    found beside the telemetry; skipped: [(path, why)] of files a folder
    scan left out."""

    def __init__(self):
        self.files = []
        self.remote = []
        self.console = []
        self.side = dict((n, []) for n in SIDE_FILES)
        self.skipped = []

    def __iter__(self):  # files, remote = resolve(...)
        return iter((self.files, self.remote))


def resolve(inputs, strict=False):
    """Return a Resolved. Files found in folders that are not telemetry are
    skipped; a file named explicitly that is not telemetry is an error."""
    if not inputs:
        raise InputError("no input given")
    res = Resolved()
    cands = []           # (path, explicit)
    folders = []
    for p in inputs:
        if is_uri(p) and not p.startswith("file://"):
            res.remote.append(p)
            continue
        if p.startswith("file://"):
            p = p[len("file://"):]
        if any(ch in p for ch in "*?["):
            matches = sorted(glob.glob(p, recursive=True))
            if not matches:
                raise InputError("%s: matches no files" % p)
            for mp in matches:
                if os.path.isdir(mp):
                    folders.append(mp)
                    cands.extend((f, False) for f in _walk(mp))
                elif os.path.isfile(mp):
                    cands.append((mp, False))
            continue
        if os.path.isdir(p):
            folders.append(p)
            found = _walk(p)
            if not found:
                raise InputError("%s: folder has no telemetry files (*.jsonl, *.ndjson, *.json, *.log, *.txt, "
                                 "optionally .gz)" % p)
            cands.extend((f, False) for f in found)
        elif os.path.isfile(p):
            cands.append((p, True))
        elif os.path.exists(p):
            raise InputError("%s: not a regular file or folder" % p)
        else:
            raise InputError("%s: no such file or directory" % p)
    seen = set()
    side_seen = set()
    for f, explicit in cands:
        a = os.path.abspath(f)
        if a in seen:
            continue
        seen.add(a)
        base = os.path.basename(a)
        if not explicit and base in SIDE_FILES:
            if a not in side_seen:
                side_seen.add(a)
                res.side[base].append(a)
            continue
        head = sniff(a)
        kind = classify(head)
        if kind is None and (explicit or strict) and head.strip():
            raise InputError("%s: not telemetry: %s" % (f, _what(a, head)))
        if kind is None and not explicit:
            res.skipped.append((a, _what(a, head)))
            continue
        res.files.append(a)
        if kind == "console":
            res.console.append(a)
    # side files beside the telemetry (sim, mesh, demo outputs)
    dirs = []
    for f in res.files:
        d = os.path.dirname(f)
        if d not in dirs:
            dirs.append(d)
    for d in dirs + [os.path.abspath(x) for x in folders]:
        for n in SIDE_FILES:
            q = os.path.join(d, n)
            if q not in side_seen and os.path.isfile(q):
                side_seen.add(q)
                res.side[n].append(q)
    if not res.files and not res.remote:
        if res.skipped:
            raise InputError("no telemetry files in %s (%d file(s) skipped as not telemetry, e.g. %s: %s)"
                             % (" ".join(inputs), len(res.skipped), res.skipped[0][0], res.skipped[0][1]))
        raise InputError("no telemetry files found in %s" % " ".join(inputs))
    return res


def source_path(src):
    """A Spark input file URI (file:///a/b%20c.jsonl) as a local path."""
    if src and src.startswith("file:"):
        from urllib.parse import unquote, urlparse
        return unquote(urlparse(src).path)
    return src
