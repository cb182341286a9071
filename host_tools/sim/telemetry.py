"""Telemetry writer for the simulator (docs/reference/INTERFACES.md "Telemetry
records"): versioned JSON lines, one record per line.

Output is canonical so that the same seed gives byte-identical files: keys
sorted, no spaces, times as seconds rounded to the millisecond, no wall-clock
values. Records that concern the whole simulation rather than one node (the
`topology` record, partition/heal events) carry ``"node": ""``.
"""
import json
from snake import report

VERSION = 1
KINDS = ("state", "peers", "counters", "probe", "event", "topology")
from snake.telemetry import LINK_NAMES  # noqa: E402,F401  (the firmware's names)

# Required fields per kind (beyond v, kind, t, node) and their JSON types.
_NUM = (int, float)
FIELDS = {
    "state": {"root": str, "root_seq": int, "parent": (str, type(None)), "coords": list,
              "depth": int, "desc": (str, type(None)), "peers": int, "routes": int},
    "peers": {"peers": list},
    "counters": {"rx": dict, "tx": dict, "tx_bytes": dict, "tx_link": dict,
                 "tx_bytes_link": dict, "drops": dict, "verify_done": int,
                 "verify_skipped": int, "verify_cached": int, "evictions": dict,
                 "occupancy": dict, "mem_free": (int, type(None))},
    "probe": {"probe": str, "id": int, "src": str, "dst": str, "ok": bool,
              "rtt_ms": _NUM + (type(None),), "hops": (int, type(None)),
              "path": (list, type(None))},
    "event": {"event": str, "detail": str},
    "topology": {"edges": list},
}
# Optional fields per kind and their JSON types when present (`names`: in
# the first `topology` record and those where it changed).
OPTIONAL = {"topology": {"names": dict}}


def t_seconds(t_us):
    """Virtual microseconds -> float seconds rounded to the millisecond."""
    return (t_us // 1000) / 1000.0


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def dumps(rec):
    """Canonical JSON of a record (= json.dumps(rec, sort_keys=True,
    separators=(",", ":"), ensure_ascii=True), with one encoder for all)."""
    return _ENCODER.encode(rec)


def record(kind, t_us, node, fields):
    rec = {"v": VERSION, "kind": kind, "t": t_seconds(t_us), "node": node}
    rec.update(fields)
    return rec


class Writer:
    """Writes records to a file object (or keeps them in memory when
    `fileobj` is None and `keep` is true)."""

    def __init__(self, fileobj=None, keep=False):
        self.f = fileobj
        self.keep = keep
        self.records = [] if keep else None
        self.count = 0
        self.by_kind = {k: 0 for k in KINDS}

    def write(self, kind, t_us, node, fields):
        rec = record(kind, t_us, node, fields)
        self.count += 1
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
        if self.f is not None:
            self.f.write(dumps(rec))
            self.f.write("\n")
        if self.keep:
            self.records.append(rec)
        return rec

    def close(self):
        if self.f is not None:
            self.f.flush()


# -- record bodies from a router snapshot -----------------------------------

def _int(x, default=0):
    return x if isinstance(x, int) and not isinstance(x, bool) else default


def _len_or_int(x):
    if isinstance(x, (list, tuple, dict)):
        return len(x)
    return _int(x)


def state_fields(snap):
    coords = snap.get("coords") or []
    return {
        "root": snap.get("root") or "",
        "root_seq": _int(snap.get("root_seq")),
        "parent": snap.get("parent"),
        "coords": [int(c) for c in coords],
        "depth": _int(snap.get("depth"), len(coords)),
        "desc": snap.get("desc"),
        "peers": _len_or_int(snap.get("peers")),
        "routes": _len_or_int(snap.get("routes")),
    }


def _link_name(x):
    if isinstance(x, int) and 0 <= x < len(LINK_NAMES):
        return LINK_NAMES[x]
    if isinstance(x, str):
        return x
    return "wifi"


def peers_list(router, fallback):
    """`peers` record body: the router's own peer list (``report.peers(router)``,
    firmware/snake/report.py) reduced to the record's fields, else
    `fallback()` (the simulator's view)."""
    peers = report.peers(router) if hasattr(router, "port_key") else None
    if not isinstance(peers, list):
        peers = fallback() if callable(fallback) else fallback
    out = []
    for p in peers:
        out.append({"port": _int(p.get("port")), "key": p.get("key") or "",
                    "link": _link_name(p.get("link", p.get("link_type"))),
                    "root": p.get("root"), "root_seq": p.get("root_seq")})
    out.sort(key=lambda p: p["port"])
    return out


def counters_fields(router):
    """`counters` record body from a router: ``router.counters.as_dict()``
    (rx, tx, drops, verify_*, plus any extra counters it has) with
    ``report.evictions(router)`` and ``report.occupancy(router)``
    (firmware/snake/report.py); mem_free is null in the simulator."""
    c = router.counters.as_dict() if hasattr(router, "counters") else {}
    d = dict(c)
    for k in ("rx", "tx", "tx_bytes", "tx_link", "tx_bytes_link", "drops"):
        if not isinstance(d.get(k), dict):
            d[k] = {}
    snake = hasattr(router, "snake")      # a snakemesh Router (snake/router.py)
    d["evictions"] = report.evictions(router) if snake else {}
    occ = report.occupancy(router) if snake else {}
    d["occupancy"] = {k: list(v) for k, v in occ.items()}
    if snake:
        d["capacity"] = {k: list(v) for k, v in report.capacity(router).items()}
    for k in ("verify_done", "verify_skipped", "verify_cached"):
        d[k] = _int(d.get(k))
    d["mem_free"] = None
    return d


def validate(rec):
    """List of problems with one telemetry record (empty = valid)."""
    errs = []
    if not isinstance(rec, dict):
        return ["not an object"]
    if rec.get("v") != VERSION:
        errs.append("v must be %d" % VERSION)
    kind = rec.get("kind")
    if kind not in FIELDS:
        return errs + ["unknown kind %r" % (kind,)]
    if not isinstance(rec.get("t"), _NUM) or isinstance(rec.get("t"), bool):
        errs.append("t must be a number")
    if not isinstance(rec.get("node"), str):
        errs.append("node must be a string")
    for k, typ in FIELDS[kind].items():
        if k not in rec:
            errs.append("%s: missing %s" % (kind, k))
        elif not isinstance(rec[k], typ) or (isinstance(rec[k], bool) and typ is int):
            errs.append("%s: %s has type %s" % (kind, k, type(rec[k]).__name__))
    for k, typ in OPTIONAL.get(kind, {}).items():
        if k in rec and not isinstance(rec[k], typ):
            errs.append("%s: %s has type %s" % (kind, k, type(rec[k]).__name__))
    if kind == "peers" and isinstance(rec.get("peers"), list):
        for p in rec["peers"]:
            if not isinstance(p, dict) or set(p) != {"port", "key", "link", "root", "root_seq"}:
                errs.append("peers: bad entry %r" % (p,))
            elif p["link"] not in LINK_NAMES:
                errs.append("peers: bad link %r" % (p["link"],))
    if kind == "topology" and isinstance(rec.get("edges"), list):
        for e in rec["edges"]:
            if not (isinstance(e, list) and len(e) == 3 and e[2] in LINK_NAMES):
                errs.append("topology: bad edge %r" % (e,))
    return errs
