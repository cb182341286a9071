"""Resolve `analyze` inputs (files, folders, globs) to a list of telemetry
files, and reject unusable ones before Spark starts.

Local paths are expanded here (folders recursively, globs with `glob`), each
file's head is sniffed so that binary data or a corrupt gzip file is a clear
error rather than thousands of rejected lines. Paths with a URI scheme
(`hdfs://`, `s3a://`, `file://`...) are passed to Spark unchanged.
"""
import glob
import gzip
import os
import re
import zlib

from host_tools.errors import InputError

TELEMETRY_SUFFIXES = (".jsonl", ".ndjson", ".json", ".log", ".txt")
COMPRESSED_SUFFIXES = (".gz",)
SNIFF_BYTES = 8192
_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_uri(p):
    return bool(_URI.match(p))


def _is_telemetry_name(name):
    n = name.lower()
    if n.endswith(COMPRESSED_SUFFIXES):
        n = n[: n.rfind(".")]
    return n.endswith(TELEMETRY_SUFFIXES)


def _is_analysis_output(d):
    return os.path.exists(os.path.join(d, "summary.json")) and os.path.isdir(os.path.join(d, "states"))


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


def sniff(path):
    """Raise InputError if `path` is binary data or an unreadable gzip file."""
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
    if b"\x00" in head:
        raise InputError("%s: binary data, not telemetry JSON lines" % path)
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:  # a multi-byte char cut by the sniff window is fine
            raise InputError("%s: binary data, not telemetry JSON lines (invalid UTF-8)" % path)


def is_console_capture(path):
    """A console capture has `@sm ` lines (docs/INTERFACES.md, console
    protocol) within its first SNIFF_BYTES."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                head = f.read(SNIFF_BYTES)
        else:
            with open(path, "rb") as f:
                head = f.read(SNIFF_BYTES)
    except (OSError, EOFError, zlib.error):
        return False
    return any(line.lstrip().startswith(b"@sm ") for line in head.splitlines())


def resolve(inputs):
    """Return (files, remote) where files are local paths and remote are URIs."""
    if not inputs:
        raise InputError("no input given")
    files, remote = [], []
    for p in inputs:
        if is_uri(p) and not p.startswith("file://"):
            remote.append(p)
            continue
        if p.startswith("file://"):
            p = p[len("file://"):]
        if any(ch in p for ch in "*?["):
            matches = sorted(glob.glob(p, recursive=True))
            if not matches:
                raise InputError("%s: matches no files" % p)
            for mp in matches:
                if os.path.isdir(mp):
                    files.extend(_walk(mp))
                elif os.path.isfile(mp):
                    files.append(mp)
            continue
        if os.path.isdir(p):
            found = _walk(p)
            if not found:
                raise InputError("%s: folder has no telemetry files (*.jsonl, *.ndjson, *.json, *.log, *.txt, optionally .gz)" % p)
            files.extend(found)
        elif os.path.isfile(p):
            files.append(p)
        elif os.path.exists(p):
            raise InputError("%s: not a regular file or folder" % p)
        else:
            raise InputError("%s: no such file or directory" % p)
    seen = set()
    uniq = []
    for f in files:
        a = os.path.abspath(f)
        if a not in seen:
            seen.add(a)
            uniq.append(a)
    for f in uniq:
        sniff(f)
    if not uniq and not remote:
        raise InputError("no telemetry files found in %s" % " ".join(inputs))
    return uniq, remote
