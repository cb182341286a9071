"""Console replies for people: aligned `key  value` lists and tables,
numbers rounded (no 0.6860000000000001), empty values as "none"/0, keys
cut to 16 hex digits (or shown as node names when a names file is given).

Shared by the one-shot commands (status, peers, ..., ping, trace) and the
interactive console. Every renderer takes the reply without its envelope
(re/ok/id), `wide` (full keys) and `names` (host_tools.names.Names).
"""
import math

from host_tools.names import EMPTY

FRAME_TYPES = ("keepalive", "announcement", "bootstrap", "wakeup", "traffic")
from snake.telemetry import LINK_NAMES as LINK_TYPES  # noqa: E402  (the firmware's names)
# What a user calls each link type, the one name every table and drawing
# shows: multicast-discovered (wifi), mDNS (bonjour) and static TCP peers
# (remote) all run over Wi-Fi on a board.
LINK_LABELS = {"wifi": "Wi-Fi", "bonjour": "Wi-Fi", "remote": "Wi-Fi", "ble": "BLE", "espnow": "ESP-NOW",
               "local": "local"}


def link_label(kind):
    """The user's name of a link type ("remote" -> "Wi-Fi"); an unknown one
    as it came, None as "unknown"."""
    if not kind:
        return "unknown"
    return LINK_LABELS.get(str(kind).lower(), str(kind))
# tables that bound the mesh (contract 2) vs caches meant to run full
BOUNDING = ("peers", "routes", "depth")
CACHES = ("sigcache", "coords", "wakeups")


# ---------------------------------------------------------------- basics ---

def num(v):
    """A number for people: ints as they are, floats with at most 2
    decimals (3 below 1), no trailing zeros."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v == int(v) and abs(v) < 1e15:
            return str(int(v))
        s = ("%.3f" if abs(v) < 1 else "%.2f") % v
        return s.rstrip("0").rstrip(".") if "." in s else s
    return str(v)


def short(key, wide=False, names=EMPTY):
    if key is None:
        return "-"
    if not isinstance(key, str):
        return str(key)
    n = names.name(key)
    k = key if (wide or len(key) <= 16) else key[:16]
    return "%s (%s)" % (k, n) if n else k


def fmt(v, wide=False):
    if v is None:
        return "-"
    if isinstance(v, (bool, int, float)):
        return num(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(fmt(x, wide) for x in v) + "]"
    if isinstance(v, dict):
        if not v:
            return "none"
        return " ".join("%s=%s" % (k, fmt(x, wide)) for k, x in sorted(v.items()))
    if isinstance(v, str) and v == "":
        return "none"
    return str(v)


def table(headers, rows, right=()):
    """Columns aligned; `right`: indexes of right-aligned (numeric) columns."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        parts = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def kv(pairs, indent=""):
    width = max([len(k) for k, _ in pairs] or [0])
    return "\n".join("%s%s  %s" % (indent, k.ljust(width), v) for k, v in pairs)


def grid(pairs, cols=3):
    """`key value` pairs in `cols` aligned columns (short lists stay short)."""
    if not pairs:
        return ""
    rows = [pairs[i:i + cols] for i in range(0, len(pairs), cols)]
    kw = [max(len(r[c][0]) for r in rows if c < len(r)) for c in range(min(cols, len(pairs)))]
    vw = [max(len(r[c][1]) for r in rows if c < len(r)) for c in range(min(cols, len(pairs)))]
    lines = []
    for r in rows:
        cells = ["%s  %s" % (k.ljust(kw[c]), v.rjust(vw[c])) for c, (k, v) in enumerate(r)]
        lines.append("    ".join(cells).rstrip())
    return "\n".join(lines)


def indent(text, by="  "):
    return "\n".join(by + l if l else l for l in text.splitlines())


def strip_envelope(reply):
    return dict((k, v) for k, v in reply.items() if k not in ("re", "ok", "id"))


def pct(part, whole):
    if not whole:
        return "-"
    p = 100.0 * part / whole
    return "%s%%" % (num(round(p, 1)) if p < 99.95 or part == whole else "99.9")


def _flatten(prefix, v, out):
    if isinstance(v, dict) and v:
        for k in sorted(v):
            _flatten(prefix + "." + str(k) if prefix else str(k), v[k], out)
    else:
        out.append((prefix, v))


# ------------------------------------------------------------- renderers ---

STATUS_FIELDS = ["key", "version", "root", "root_seq", "parent", "coords", "depth", "desc",
                 "peers", "routes", "capacity", "uptime_s", "mem_free", "listen"]
_KEY_FIELDS = ("key", "root", "parent", "desc")


def _capacity_text(cap):
    parts = []
    for t in sorted(cap, key=lambda t: (BOUNDING.index(t) if t in BOUNDING else 9, t)):
        v = cap[t]
        if isinstance(v, (list, tuple)) and len(v) >= 2:
            s = "%s %s/%s" % (t, num(v[0]), num(v[1]))
            if len(v) > 2 and v[2]:
                s += " (%s refused)" % num(v[2])
            if v[0] is not None and v[1] and v[0] >= v[1]:
                s += " FULL"
            parts.append(s)
    return ", ".join(parts) or "none"


def render_status(d, wide=False, names=EMPTY):
    keys = STATUS_FIELDS + sorted(k for k in d if k not in STATUS_FIELDS)
    pairs = []
    for k in keys:
        if k not in d:
            continue
        v = d[k]
        if k in _KEY_FIELDS:
            text = short(v, True, names) if v is not None else ("none" if k != "parent" else "none (this node is the root)")
        elif k == "capacity" and isinstance(v, dict):
            text = _capacity_text(v)
        elif k == "listen" and isinstance(v, dict):
            text = ", ".join("%s %s" % (n, a) for n, a in sorted(v.items())) or "none"
        else:
            text = fmt(v, True)
        pairs.append((k, text))
    return kv(pairs)


def render_peers(d, wide=False, names=EMPTY):
    peers = d.get("peers") or []
    if not peers:
        return "no peers"
    headers = ["PORT", "KEY", "LINK", "ROOT", "ROOT_SEQ", "COORDS"]
    rows = [[p.get("port"), short(p.get("key"), wide), link_label(p.get("link")) if p.get("link") else "-",
             short(p.get("root"), wide),
             fmt(p.get("root_seq")), fmt(p.get("coords"))] for p in peers]
    if len(names):
        headers.insert(2, "NAME")
        for r, p in zip(rows, peers):
            r.insert(2, names.name(p.get("key")) or "-")
    return table(headers, rows)


def render_tree(d, wide=False, names=EMPTY):
    pairs = []
    for k in ("root", "root_seq", "parent", "coords", "depth"):
        if k in d:
            v = d[k]
            pairs.append((k, short(v, True, names) if k in ("root", "parent") and v else
                          ("none (this node is the root)" if k == "parent" else fmt(v))))
    anc = d.get("ancestors") or []
    text = kv(pairs)
    if anc:
        text += "\nancestors (nearest first):\n" + "\n".join(
            "  %d  %s" % (i + 1, short(a, True, names)) for i, a in enumerate(anc))
    return text


def render_snake(d, wide=False, names=EMPTY):
    desc = d.get("desc")
    if not desc:
        text = "descending: none"
    else:
        text = "descending: %s (port %s, root %s, root_seq %s)" % (
            short(desc.get("key"), True, names), fmt(desc.get("port")), short(desc.get("root"), wide),
            fmt(desc.get("root_seq")))
    return text + "\nsnake routes: %s" % fmt(d.get("routes"))


def render_routes(d, wide=False, names=EMPTY):
    routes = d.get("routes") or []
    if not routes:
        return "no routes"
    headers = ["KEY", "SRC", "DST", "ROOT", "ROOT_SEQ", "WM_KEY", "WM_SEQ", "AGE_MS"]
    rows = [[short(r.get("key"), wide), fmt(r.get("src_port")), fmt(r.get("dst_port")),
             short(r.get("root"), wide), fmt(r.get("root_seq")), short(r.get("wm_key"), wide),
             fmt(r.get("wm_seq")), fmt(r.get("age_ms"))] for r in routes]
    if len(names):
        headers.insert(1, "NAME")
        for row, r in zip(rows, routes):
            row.insert(1, names.name(r.get("key")) or "-")
    return table(headers, rows)


def _order(keys, first):
    return [k for k in first if k in keys] + sorted(k for k in keys if k not in first)


def render_stats(d, wide=False, names=EMPTY):
    """`stats` grouped by concern: frames (traffic and control), traffic,
    link types, drops, crypto, links and handshakes, tables, memory; any
    field not known here is listed at the end, so nothing is hidden."""
    d = dict(d)
    used = set()
    out = []

    def take(k, default=None):
        used.add(k)
        return d.get(k, default)

    def section(title, body):
        out.append(title + "\n" + indent(body))

    rx, tx, txb = take("rx") or {}, take("tx") or {}, take("tx_bytes")
    types = _order(set(rx) | set(tx) | set(txb or {}), FRAME_TYPES)
    if types:
        headers = ["TYPE", "RX", "TX"] + (["TX_BYTES"] if txb is not None else [])
        rows = []
        for t in types:
            row = [t, num(rx.get(t, 0)), num(tx.get(t, 0))]
            if txb is not None:
                row.append(num(txb.get(t, 0)))
            rows.append(row)
        body = table(headers, rows, right=(1, 2, 3))
        ctl_f = sum(v for t, v in tx.items() if t != "traffic")
        all_f = sum(tx.values())
        body += "\ncontrol (every type but traffic): %s of %s frames sent (%s)" % (
            num(ctl_f), num(all_f), pct(ctl_f, all_f))
        if txb is not None:
            ctl_b = sum(v for t, v in txb.items() if t != "traffic")
            all_b = sum(txb.values())
            body += ", %s of %s bytes (%s)" % (num(ctl_b), num(all_b), pct(ctl_b, all_b))
        section("frames", body)

    links = dict(take("links") or {})
    probes = take("probes")
    pairs = [(k, num(take(k, 0))) for k in ("originated", "delivered", "forwarded")]
    if "app_rx" in links:
        pairs.append(("app_rx", num(links.pop("app_rx"))))
    body = grid(pairs, 4)
    if probes:
        body += "\nprobes:\n" + indent(grid([(k, num(v)) for k, v in sorted(probes.items())]))
    section("traffic", body)

    dg = take("datagrams")
    if dg:
        dg = dict(dg)
        failed = sorted((k[len("failed_"):], v) for k, v in dg.items() if k.startswith("failed_"))
        body = grid([(k, num(dg.get(k, 0))) for k in ("sent", "delivered", "received", "pending",
                                                      "retries", "duplicates")], 3)
        body += "\nfailed: " + (", ".join("%s %s" % (k, num(v)) for k, v in failed if v) or "none")
        rest = sorted(k for k in dg if not k.startswith("failed_")
                      and k not in ("sent", "delivered", "received", "pending", "retries", "duplicates"))
        body += "\n" + grid([(k, num(dg[k])) for k in rest], 3)
        section("application datagrams", body)
    elif "datagrams" in d:
        section("application datagrams", "none yet (the layer is built on first use)")

    tl, tlb = take("tx_link"), take("tx_bytes_link")
    if tl is not None or tlb is not None:
        tl, tlb = tl or {}, tlb or {}
        kinds = [k for k in _order(set(tl) | set(tlb), LINK_TYPES) if tl.get(k) or tlb.get(k)]
        if kinds:
            body = table(["LINK", "TX", "TX_BYTES"], [[k, num(tl.get(k, 0)), num(tlb.get(k, 0))]
                                                      for k in kinds], right=(1, 2))
        else:
            body = "nothing sent yet"
        section("sent by link type", body)

    drops = take("drops") or {}
    nz = sorted(((v, k) for k, v in drops.items() if v), key=lambda x: (-x[0], x[1]))
    section("drops by reason", kv([(k, num(v)) for v, k in nz]) if nz else "none")

    section("crypto (signature checks)", grid([
        ("verify_done", num(take("verify_done", 0))), ("verify_cached", num(take("verify_cached", 0))),
        ("verify_skipped", num(take("verify_skipped", 0)))]))

    oom = links.pop("oom", None)
    order = ("links_up", "links_down", "hs_ok", "dials", "dial_fail", "accepts", "duplicate", "no_port",
             "framing", "core_disconnect")
    pairs = [(k, num(links[k])) for k in _order(set(links), order)]
    body = grid(pairs) if pairs else "no link counters"
    hf = take("handshake_failures")
    if hf is not None or "handshake_failures" in d:
        body += "\nhandshake failures: %s" % (", ".join("%s %s" % (k, num(v)) for k, v in sorted(hf.items()))
                                             if hf else "none")
    queues = take("queues")
    if queues:
        body += "\nsend queues:\n" + indent(table(
            ["PORT", "LEN", "LIMIT", "HIGH", "FULL"],
            [[q.get("port"), num(q.get("len", 0)), num(q.get("limit", 0)), num(q.get("high", 0)),
              num(q.get("full", 0))] for q in queues], right=(1, 2, 3, 4)))
    elif queues is not None:
        body += "\nsend queues: none (no links)"
    section("links and handshakes", body)

    occ, ev, cap = take("occupancy") or {}, take("evictions") or {}, take("capacity") or {}
    tables_ = _order(set(occ) | set(ev) | set(cap), BOUNDING + CACHES)
    if tables_:
        rows = []
        for t in tables_:
            u = c = refused = None
            if t in cap and isinstance(cap[t], (list, tuple)) and len(cap[t]) >= 2:
                u, c = cap[t][0], cap[t][1]
                refused = cap[t][2] if len(cap[t]) > 2 else None
            elif t in occ and isinstance(occ[t], (list, tuple)) and len(occ[t]) >= 2:
                u, c = occ[t][0], occ[t][1]
            note = "cache, runs full by design" if t in CACHES else ("FULL" if u is not None and c and u >= c
                                                                      else "")
            rows.append([t, "-" if u is None else num(u), "-" if c is None else num(c),
                         pct(u, c) if u is not None and c else "-", num(ev.get(t, 0)) if t in ev else "-",
                         "-" if refused is None else num(refused), note])
        section("tables", table(["TABLE", "USED", "CAPACITY", "FULL%", "EVICTED", "REFUSED", "NOTE"], rows,
                                right=(1, 2, 3, 4, 5)))

    console = dict(take("console") or {})
    pairs = [("mem_free", num(take("mem_free")) if d.get("mem_free") is not None else "-")]
    if oom is not None:
        pairs.append(("oom (links)", num(oom)))
    if "oom" in console:
        pairs.append(("oom (console)", num(console.pop("oom"))))
    section("memory", grid(pairs))
    if console:
        section("console", grid([(k, num(v)) for k, v in sorted(console.items())]))

    rest = []
    for k in sorted(d):
        if k not in used:
            _flatten(k, d[k], rest)
    if rest:
        section("other", kv([(k, fmt(v)) for k, v in rest]))
    return "\n\n".join(out)


def _bytes(n):
    if not isinstance(n, (int, float)):
        return "-"
    return "%s B (%s KiB)" % (num(int(n)), num(round(n / 1024.0, 1)))


def render_mem(d, wide=False, names=EMPTY):
    """`mem`: the heap (total, used, free, largest free block) and what the
    parts of the node took, measured at boot."""
    pairs = [(k, _bytes(d[k])) for k in ("heap", "used", "free", "largest_free") if k in d]
    pairs += [(k, fmt(d[k])) for k in sorted(d) if k not in ("heap", "used", "free", "largest_free", "parts")]
    text = kv(pairs)
    parts = d.get("parts")
    if isinstance(parts, dict) and parts:
        total = sum(v for v in parts.values() if isinstance(v, (int, float)))
        rows = [[k, num(v), pct(v, total)] for k, v in sorted(parts.items(), key=lambda kv_: -(kv_[1] or 0))]
        text += "\nheap by part (measured at boot):\n" + indent(table(["PART", "BYTES", "SHARE"], rows,
                                                                       right=(1, 2)))
    return text


def render_help(d, wide=False, names=EMPTY):
    return "commands: " + " ".join(d.get("commands") or [])


def render_version(d, wide=False, names=EMPTY):
    return kv([(k, fmt(d.get(k))) for k in ("version", "board", "platform", "crypto") if k in d])


def render_telemetry(d, wide=False, names=EMPTY):
    v = d.get("telemetry")
    return "telemetry off" if v in (None, "off") else "telemetry every %s s" % num(v)


def ping_summary(d):
    sent = int(d.get("sent") or 0)
    rtts = [float(x) for x in (d.get("rtts_ms") or []) if isinstance(x, (int, float))]
    received = int(d.get("received", len(rtts)) or 0)
    loss = 100.0 * (sent - received) / sent if sent else 100.0
    lines = ["%d probes sent, %d received, %s%% loss" % (sent, received, num(round(loss, 1)))]
    if rtts:
        avg = sum(rtts) / len(rtts)
        mdev = math.sqrt(sum((x - avg) ** 2 for x in rtts) / len(rtts))
        lines.append("rtt min/avg/max/mdev = %.2f/%.2f/%.2f/%.2f ms" % (min(rtts), avg, max(rtts), mdev))
    return "\n".join(lines), received


def render_ping(d, wide=False, names=EMPTY, header=None):
    lines = [header] if header else []
    for i, r in enumerate(d.get("rtts_ms") or []):
        lines.append("  reply %d: rtt %s ms" % (i + 1, num(r)))
    lines.append(ping_summary(d)[0])
    return "\n".join(lines)


def render_trace(d, wide=False, names=EMPTY, header=None, reached=None):
    lines = [header] if header else []
    for i, h in enumerate(d.get("hops") or []):
        lines.append("  %2d  %s  %s ms" % (i + 1, short(h.get("key"), wide, names), num(h.get("rtt_ms"))
                                           if h.get("rtt_ms") is not None else "-"))
    if reached is None:
        reached = bool(d.get("reached", d.get("ok")))
    lines.append("reached" if reached else "destination not reached")
    return "\n".join(lines)


RENDERERS = {"status": render_status, "peers": render_peers, "tree": render_tree,
             "snake": render_snake, "routes": render_routes, "stats": render_stats,
             "mem": render_mem, "help": render_help, "version": render_version, "telemetry": render_telemetry,
             "ping": render_ping, "trace": render_trace}


def render_record(rec, names=EMPTY):
    """One telemetry record as one line (the console prints them as they
    come): events in words, the periodic records summarised."""
    kind = rec.get("kind")
    who = short(rec.get("node"), False, names)
    if kind == "event":
        det = rec.get("detail")
        if isinstance(det, str) and len(det) == 64:
            det = short(det, False, names)
        return "event %s %s%s" % (who, rec.get("event"), " " + str(det) if det is not None else "")
    if kind == "state":
        return "state %s root %s depth %s peers %s routes %s desc %s" % (
            who, short(rec.get("root"), False, names), fmt(rec.get("depth")), fmt(rec.get("peers")),
            fmt(rec.get("routes")), short(rec.get("desc"), False, names))
    if kind == "counters":
        tx = rec.get("tx") or {}
        drops = rec.get("drops") or {}
        return "counters %s tx %s frames, drops %s, mem_free %s" % (
            who, num(sum(tx.values())), num(sum(drops.values())), fmt(rec.get("mem_free")))
    if kind == "peers":
        ps = rec.get("peers") or []
        return "peers %s %s" % (who, ", ".join("%s/%s" % (short(p.get("key"), False, names), link_label(p.get("link")))
                                                for p in ps) or "none")
    return "%s %s" % (kind, who)
