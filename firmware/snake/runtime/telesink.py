# Telemetry over the mesh: the node's telemetry records as datagrams to a
# sink, a gateway (`snakemesh gateway`, docs/guides/GATEWAY.md).
#
# Cold code: Node.telemetry_to_sink (snake/runtime/node.py) loads this
# module for one period and lets go of it, so a node holds its code only
# while a period builds and sends.
#
# One datagram (service SERVICE, no ack: a lost period is made good by the
# next) carries one record, or a part of one: a JSON object with `kind`,
# `up` and the record's fields, without `v`, `node` and `t` (the gateway
# knows the source key and the time it heard it). Compact: a field whose
# JSON is unchanged since it was last handed to the mesh is left out and
# the object says `"d":1` (a delta the gateway merges into what it holds),
# and of a field whose value is an object (counters' rx, tx, drops,
# datagrams ...) only the entries that changed go (_dict_field); every FULL_EVERY periods, and whenever the sink changes, the records go
# whole. A record larger than one datagram (the profile's dgram_max) is
# cut into parts between fields; every part but the last says `"m":1`.
# A `state` record goes every period (the gateway's "last heard"); a
# `counters` or `peers` record with nothing changed does not. The bytes
# one period sends are bounded by the profile's telemetry_bytes: a record
# that does not fit waits for the next period (counted `deferred`), the
# first record of a period always goes.
import json

from snake import platform

SERVICE = 30
FULL_EVERY = 10
SKIP = ("v", "kind", "node", "t", "up")
SEPARATORS = (",", ":")
GATEWAY_PREFIX = b"\xff\xff"   # host_tools/keystore.py ROOT_PREFIX: a gateway's key


def new_state():
    # a plain dict, so that what the node keeps between periods holds no
    # code of this module; counters_fields (snake/runtime/cmds.py) shows
    # every entry but "hashes" and "n" in the `counters` record
    return {"hashes": {},    # kind -> {field: hash of its JSON as last sent}
            "n": 0,          # periods
            "sink": None,    # hex key of the sink in use
            "sent": 0,       # datagrams handed to the mesh
            "bytes": 0,      # their payload bytes
            "deferred": 0,   # records left for a later period (budget)
            "failed": 0,     # sends that failed at once (no_route, busy, no datagram layer)
            "too_big": 0,    # fields larger than one datagram (left out)
            "no_sink": 0}    # periods without a sink (auto found none)


def find_sink(node, sink):
    """The key telemetry goes to: the configured one, or (auto) the tree
    root when it holds a gateway's key (a gateway made by `keygen --profile
    GATEWAY` is the root by the provisioning policy); else None."""
    if sink is not None:
        return sink
    root = bytes(node.router.tree.root_key())
    if root[:2] == GATEWAY_PREFIX and root != node.key:
        return root
    return None


def parts(kind, up, fields, delta, limit):
    """The datagrams of one record: JSON texts of at most `limit` bytes."""
    head = '{"kind":"%s","up":%d%s' % (kind, up, ',"d":1' if delta else "")
    out = []
    cur = head
    for f in fields:
        if len(cur) + 1 + len(f) + 8 > limit and cur != head:
            out.append(cur + ',"m":1}')
            cur = head
        cur += "," + f
    out.append(cur + "}")
    return out


def _js(v):
    # JSON without the blanks after , and : (a tenth of the bytes)
    return json.dumps(v, separators=SEPARATORS)


def _dict_field(f, v, prev):
    """(JSON text to send or None, what to remember) for a field whose value
    is an object (counters' rx, tx, drops, datagrams ...): remembered as a
    tuple, the hash of its key set then one hash per value in key order, so
    that a delta carries only the entries that changed (the gateway merges
    them into the object it holds). A changed key set sends it whole."""
    ks = sorted(v)
    h = [hash("\0".join(ks))]
    for k in ks:
        h.append(hash(_js(v[k])))
    h = tuple(h)
    if prev is None or type(prev) is not tuple or prev[0] != h[0]:
        return '"%s":%s' % (f, _js(v)), h
    out = []
    i = 1
    for k in ks:
        if prev[i] != h[i]:
            out.append('"%s":%s' % (k, _js(v[k])))
        i += 1
    if not out:
        return None, h
    return '"%s":{%s}' % (f, ",".join(out)), h


def period(node, sink):
    st = node.tele
    if st is None:
        st = node.tele = new_state()
    key = find_sink(node, sink)
    if key is None or key == node.key:
        st["no_sink"] += 1
        return
    c = node.console
    mesh = node.mesh()
    if c is None or mesh is None:
        st["failed"] += 1
        return
    hk = platform.hexstr(key)
    full = st["n"] % FULL_EVERY == 0 or hk != st["sink"]
    st["sink"] = hk
    st["n"] += 1
    n0 = st["n"]
    hashes = st["hashes"]
    limit = mesh.max_size
    budget = node.profile.telemetry_bytes
    used = 0
    recs = c.records()
    k = len(recs)
    i = 0
    while i < k:
        rec = recs[(n0 + i) % k]      # a different record first each period: none starves
        i += 1
        kind = rec["kind"]
        old = hashes.get(kind)
        if old is None or full:
            old = {}
        new = {}
        fields = []
        for f in rec:
            if f in SKIP:
                continue
            v = rec[f]
            if type(v) is dict:
                js, h = _dict_field(f, v, old.get(f))
            else:
                js = '"%s":%s' % (f, _js(v))
                h = hash(js)
            new[f] = h
            if js is not None and old.get(f) != h:
                if len(js) + 40 > limit:
                    st["too_big"] += 1
                    continue
                fields.append(js)
        if not fields and kind != "state":
            continue
        ps = parts(kind, int(rec.get("up") or 0), fields, bool(old), limit)
        n = 0
        for p in ps:
            n += len(p)
        if used and used + n > budget:
            st["deferred"] += 1
            continue
        ok = True
        for p in ps:
            h = mesh.send(key, p.encode(), SERVICE)
            if h.state == "failed":
                st["failed"] += 1
                ok = False
                break
            st["sent"] += 1
            st["bytes"] += len(p)
        if not ok:
            return
        used += n
        for f in new:
            old[f] = new[f]
        hashes[kind] = old
