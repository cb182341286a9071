"""A node's heap with every table full, on a 32-bit build of MicroPython
(issue 13): the scenario tests/host/test_heap_32bit.py asserts on and
`make bench` figure 2b reports.

Three nodes with a board profile in a TCP triangle on loopback (static
peering) plus a BLE link per pair through the emulated radio medium (when
the profile has BLE) and an ESP-NOW link per pair through the emulated
ESP-NOW medium (when the profile has ESP-NOW); scripted peers (Filler) take every
other port and keep every table full with a bootstrap / traffic / wakeup
flood from many keys. Every 5 s: a ping between two nodes, each node's
`stats` (occupancy) and `mem` (heap after gc.collect(), parts), for the
run's seconds and, should a node's tables not yet all have been full (or its
peers and routes not full at one sample), on until they were (at most
FILL_GRACE_S more): on a loaded machine a node verifies the flood late, and
the run waits for the tables instead of failing on the load.
With datagrams=True the datagram layer is in use meanwhile (issue 25):
every node keeps its sends in flight full (acked datagrams to a key not in
the mesh, each pending ~22 s until it fails), sends acked datagrams to the
next node (delivered: the receiver's memory of delivered datagrams fills),
and receives from a scripted peer the first fragment of a datagram of its
profile's dgram_max every round (its reassembly slots stay in flight).
With telemetry=S every node sends its telemetry over the mesh every S
seconds (issue 26) to a gateway's stand-in: its first scripted peer (a
board is never the sink in the field, a gateway is: so no node receives
datagrams and builds the datagram layer for them; a scripted peer a hop
away, since the flood keeps the routing tables full of other keys); the
datagrams that reach it are decoded as the gateway decodes them
(host_tools/gateway.py) and counted per node (res.tele_rx).

    res = run(profile, variant, heap, seconds, out_dir)
    profile: a board name (boards/NAME/profile.json) or a profile file
    res.samples[name] = [(t, free, heap, occupancy)] (free: board_free()), res.final[name] = `mem`,
    res.stats / res.status / res.alive / res.logs, res.errors (list of str)
"""
import asyncio
import ctypes
import os
import threading
import time

from host_tools.procmesh import mp32
from host_tools.errors import CliError
from host_tools.procmesh.mesh import ProcessMesh
from snake.runtime import probe
from snake.crypto import Signer

from fakepeer import FakePeer

TOPOLOGY_BLE = "a b c a\na b @ble\nb c @ble\nc a @ble\n"
TOPOLOGY_WIFI = "a b c a\n"
TOPOLOGY_ESPNOW = "a b c a @espnow\n"
NOT_IN_MESH = "5a" * 32


def first_fragment(profile, seq):
    """A datagram's first fragment (docs/reference/DATAGRAMS.md, written
    from the doc with struct): a datagram of the profile's dgram_max in
    fragments of dgram_frag, acknowledgement asked; a new id per call."""
    import struct
    from snake.profile import dgram_frag
    total = profile.dgram_max
    fr = dgram_frag(profile)
    count = -(-total // fr)
    if count < 2:            # one fragment: no reassembly; two of half each
        count = 2
    stride = -(-total // count)
    hdr = struct.pack(">2sBBBHHHBBHH", b"SD", 1, 1, 0x01, 30, 0, seq & 0xFFFF, count, 0, stride, total)
    return hdr + bytes(stride)
TABLES = ("peers", "routes", "coords", "sigcache", "wakeups")
SYNTH_PER_NODE = 48
TRAFFIC_KEYS = 6
MIN_FREE = 0.35
# A node verifies every new key of the flood; on a loaded machine a large
# table (ESP32_SPIRAM: 1024 routes) may not be full by `seconds`, nor the
# wakeup filter, whose scripted wakeups come once every WAKEUP_EVERY_S: the
# run goes on, sampling, until every node had every table full and its peers
# and routes full at one sample, for at most this much longer (then it fails
# and says which table).
FILL_GRACE_S = 120
WAKEUP_EVERY_S = 31
LINKS_WAIT_S = 60
ROUND_S = 3.0


def _setns(pid):
    """Move the calling thread into the network namespace of `pid`."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/proc/%d/ns/net" % pid, os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:     # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), "setns failed")
    finally:
        os.close(fd)


class Filler(object):
    """Scripted peers for every node, run by an asyncio loop in a thread
    that lives in the nodes' network namespace."""

    def __init__(self, ns_pid, targets, fakes_per_node, synth_per_node, traffic_keys=3):
        self.ns_pid = ns_pid              # None: the nodes are in this namespace
        self.fakes = fakes_per_node
        self.traffic_keys = traffic_keys  # synthetic traffic sources per scripted peer and round
        self.targets = targets            # [(listen port, node pubkey hex)]
        self.stop = threading.Event()
        self.error = None
        self.sent = {"bootstrap": 0, "wakeup": 0, "traffic": 0}
        # fn(seq) -> a payload the first scripted peer of each node sends it
        # every round (a datagram's first fragment, so a reassembly is in
        # flight: run(datagrams=True)), or None
        self.extra = None
        self.connected = 0
        self.peers = []           # (node index, j, FakePeer) in use
        self.retired = []         # FakePeers the node closed (their traffic counts too)
        self.redialled = 0        # scripted peers dialled again after the node closed them
        self.redial_failed = 0
        # (the third seed byte is 0 below 256 keys, so smaller profiles
        # see the keys they always saw)
        self.synth = [[Signer(bytes([0x80 + i, j & 0xFF, j >> 8]) + bytes(29))
                       for j in range(synth_per_node)] for i in range(len(targets))]
        self.thread = threading.Thread(target=self._main, daemon=True)

    def start(self):
        self.thread.start()

    def _main(self):
        try:
            if self.ns_pid is not None:
                _setns(self.ns_pid)
            asyncio.run(self._run())
        except Exception as e:   # reported by the test
            self.error = e

    async def _redial(self, i, j):
        p = FakePeer(bytes([0x70 + i, 0x10 + j]) + bytes(30), "127.0.0.1", self.targets[i][0])
        try:
            await p.connect()
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            self.redial_failed += 1
            return None
        p.start()
        self.redialled += 1
        return p

    async def _run(self):
        peers = self.peers
        for i, (port, _) in enumerate(self.targets):
            for j in range(self.fakes):
                p = FakePeer(bytes([0x70 + i, 0x10 + j]) + bytes(30), "127.0.0.1", port)
                await p.connect()
                p.start()
                peers.append((i, j, p))
                self.connected += 1
        seq = int(time.time() * 1000)
        last_wakeup = 0.0
        wake = 0
        while not self.stop.is_set():
            t0 = time.monotonic()
            seq += 1
            # every WAKEUP_EVERY_S four origins per peer, one a round:
            # within a node's wakeup budget (router._WK_*), so each is
            # verified and the wakeup filter fills
            if t0 - last_wakeup > WAKEUP_EVERY_S:
                last_wakeup = t0
                wake = 4
            elif wake:
                wake -= 1
            for k, (i, j, p) in enumerate(peers):
                if p.closed:
                    # a node may close a scripted peer (a frame trickled out
                    # too slowly on a loaded machine counts as a stall, and
                    # every scripted peer shares one source address): dial
                    # again, at most once a round, so the peers table fills
                    self.retired.append(p)
                    p = await self._redial(i, j)
                    if p is None:
                        continue
                    peers[k] = (i, j, p)
                await p.keepalive()
                keys = self.synth[i][j::self.fakes]
                for s in keys:
                    if await p.bootstrap_for(s, seq):
                        self.sent["bootstrap"] += 1
                if self.extra is not None and j == 0:
                    if await p.traffic_from(keys[0].public, bytes.fromhex(self.targets[i][1]), self.extra(seq)):
                        self.sent["traffic"] += 1
                for s in keys[:self.traffic_keys]:
                    pl = bytes(probe.make(probe.PING, seq & 0xFFFFFFFF))
                    if await p.traffic_from(s.public, bytes.fromhex(self.targets[i][1]), pl):
                        self.sent["traffic"] += 1
                if wake:
                    if await p.wakeup_for(keys[4 - wake], seq):
                        self.sent["wakeup"] += 1
            while time.monotonic() - t0 < ROUND_S and not self.stop.is_set():
                await asyncio.sleep(0.1)
        for _, _, p in peers:
            p.close()


class Result(object):
    pass


def sink_seed(i):
    """The seed of the first scripted peer of node i (Filler)."""
    return bytes([0x70 + i, 0x10]) + bytes(30)


def telemetry_received(filler, names_by_key):
    """{node name: telemetry datagrams that reached the scripted peers and
    decode as the gateway decodes them}, and how many did not decode."""
    from host_tools.gateway import SERVICE, decode
    got = {}
    bad = 0
    for p in [p for _, _, p in filler.peers] + filler.retired:
        for src, payload in list(p.traffic):
            if payload[:2] != b"SD" or len(payload) < 17 or payload[5:7] != bytes([SERVICE >> 8, SERVICE & 0xFF]):
                continue
            try:
                decode(payload[17:])
            except ValueError:
                bad += 1
                continue
            n = names_by_key.get(src.hex(), src.hex()[:8])
            got[n] = got.get(n, 0) + 1
    return got, bad


def _req(m, name, cmd):
    try:
        r = m.request(name, cmd, timeout=30)
    except CliError as e:
        raise AssertionError("node %s stopped answering (%s): %s (alive: %s)"
                             % (name, cmd, e.message[:300], m.nodes[name].alive()))
    if r.get("ok") is not True:
        raise AssertionError("node %s: %s failed: %s" % (name, cmd, r))
    return r


def run(profile, variant, heap, seconds, out_dir, log=lambda msg: None, datagrams=False, telemetry=None):
    """Run the scenario; returns a Result (raises AssertionError when the
    mesh does not even form or a console stops answering)."""
    binary = mp32.binary(variant)
    mpy = variant == "stock"
    from host_tools import BOARDS_DIR
    import json
    path = profile if os.path.isfile(profile) else os.path.join(BOARDS_DIR, profile, "profile.json")
    with open(path) as f:
        pd = json.load(f)
    ble = pd.get("ble", False)
    espnow = pd.get("espnow", False)
    os.makedirs(out_dir, exist_ok=True)
    topo = os.path.join(out_dir, "topology.txt")
    with open(topo, "w") as f:
        f.write(TOPOLOGY_BLE if ble else TOPOLOGY_WIFI)
        if espnow:
            f.write(TOPOLOGY_ESPNOW)
    want = sorted((["ble", "ble"] if ble else []) + (["espnow", "espnow"] if espnow else [])
                  + ["remote", "remote"])
    real_links = len(want)
    res = Result()
    res.profile, res.variant, res.heap, res.seconds, res.binary = profile, variant, heap, seconds, binary
    m = ProcessMesh(topo, os.path.join(out_dir, "mesh"), seed=13, profile=profile, heapsize=heap,
                    micropython=binary, mpy=mpy, log=log)
    filler = None
    res.telemetry = telemetry
    if telemetry:
        # telemetry over the mesh every `telemetry` s (issue 26): the first
        # node is the sink of the others, the second the first's
        m.node_args = dict((n, ["--sink", bytes(Signer(sink_seed(i)).public).hex(), "--telemetry", "%g" % telemetry])
                           for i, n in enumerate(m.names))
    with m:
        names = list(m.names)
        res.names = names
        m.wait_converged(timeout=120, request_timeout=30)
        # the mesh can agree (converge) over two of the triangle's links
        # while the third is still being dialled again (a static peer that
        # refused the first attempt at start-up backs off): wait for every
        # link before filling the tables
        until = time.monotonic() + LINKS_WAIT_S
        while True:
            peers = dict((n, sorted(p["link"] for p in _req(m, n, "peers")["peers"])) for n in names)
            if all(v == want for v in peers.values()) or time.monotonic() > until:
                break
            time.sleep(1)
        assert all(v == want for v in peers.values()), peers
        occ0 = _req(m, names[0], "stats")["occupancy"]
        res.cap = dict((t, occ0[t][1]) for t in TABLES)
        fakes = res.cap["peers"] - real_links
        filler = Filler(None, [(m.nodes[n].listen[1], m.hexkey(n)) for n in names],
                        fakes_per_node=fakes,
                        synth_per_node=max(SYNTH_PER_NODE, res.cap["routes"] + 16),
                        traffic_keys=max(TRAFFIC_KEYS, res.cap["coords"] // max(1, fakes) + 1))
        from snake.profile import Profile
        prof = Profile.load(path)
        res.datagrams = datagrams
        res.dgram_cap = {"pending": prof.dgram_pending, "reassembling": prof.dgram_reasm}
        if datagrams and prof.dgram_reasm:
            filler.extra = lambda seq: first_fragment(prof, seq)
        filler.start()
        try:
            res.samples = dict((n, []) for n in names)
            res.peak = {}
            res.pings = [0, 0, 0]     # sent, answered, no console reply in 30 s
            res.up0 = dict((n, _req(m, n, "status")["uptime_s"]) for n in names)
            t0 = time.monotonic()
            k = 0
            while True:
                el = time.monotonic() - t0
                if finished(res, el):
                    break
                time.sleep(5)
                if filler.error is not None:
                    raise AssertionError("scripted peers failed: %r" % (filler.error,))
                a, b = names[k % 3], names[(k + 1) % 3]
                k += 1
                if datagrams:
                    _datagram_load(m, names, res, k)
                res.pings[0] += 1
                try:
                    if m.ping(a, b, count=1, timeout=30).get("received") == 1:
                        res.pings[1] += 1
                except CliError:
                    # no reply within 30 s: a node busy verifying a flood of
                    # new keys on a loaded machine; counted and reported (the
                    # stats/mem requests below must still answer)
                    res.pings[2] += 1
                for n in names:
                    st = _req(m, n, "stats")
                    occ = st["occupancy"]
                    mem = _req(m, n, "mem")
                    res.samples[n].append((time.monotonic() - t0, board_free(mem), mem["heap"], occ))
                    dg = st.get("datagrams") or {}
                    for t in ("pending", "reassembling"):
                        res.peak[(n, "dgram_" + t)] = max(res.peak.get((n, "dgram_" + t), 0), dg.get(t, 0))
                    for t in TABLES:
                        res.peak[(n, t)] = max(res.peak.get((n, t), 0), occ[t][0])
            res.final = dict((n, _req(m, n, "mem")) for n in names)
            res.stats = dict((n, _req(m, n, "stats")) for n in names)
            res.status = dict((n, _req(m, n, "status")) for n in names)
            res.alive = dict((n, m.nodes[n].alive()) for n in names)
            res.logs = dict((n, "\n".join(l.decode("utf-8", "replace") for l in m.nodes[n].lines))
                            for n in names)
            res.sent = dict(filler.sent)
            if telemetry:
                res.tele_rx, res.tele_bad = telemetry_received(filler, dict((m.hexkey(n), n) for n in names))
        finally:
            filler.stop.set()
            filler.thread.join(10)
    res.errs = {}
    for n in names:
        try:
            with open(os.path.join(out_dir, "mesh", "logs", n + ".stderr")) as f:
                res.errs[n] = f.read()
        except OSError:
            res.errs[n] = ""
    res.errors = problems(res)
    return res


def filled(res, n):
    """Every table of node n reached its capacity at some sample, and its
    peers and routes were full together at one."""
    return all(res.peak.get((n, t), 0) == res.cap[t] for t in TABLES) and bool(steady(res, n))


def finished(res, elapsed):
    """The sampling loop stops after the run's seconds once every node's
    tables were full, or FILL_GRACE_S later regardless (problems() then
    names the table that never filled)."""
    if elapsed < res.seconds:
        return False
    return elapsed >= res.seconds + FILL_GRACE_S or all(filled(res, n) for n in res.names)


def _datagram_load(m, names, res, k):
    """Keep every node's datagram sends in flight full and its delivered
    memory filling (requests written without waiting: an acked send is
    answered when it ends)."""
    for i, n in enumerate(names):
        m.nodes[n].write_line("#dd%d send %s 2 1 %s" % (k, m.hexkey(names[(i + 1) % len(names)]), "11" * 24))
    time.sleep(0.5)     # those are delivered within this (a few hops on loopback)
    for i, n in enumerate(names):
        dg = _req(m, n, "stats").get("datagrams") or {}
        for j in range(res.dgram_cap["pending"] - dg.get("pending", 0)):
            m.nodes[n].write_line("#dg%d_%d send %s 1 1 %s" % (k, j, NOT_IN_MESH, "00" * 24))


def board_free(mem):
    """What a board would have free at this `mem` reply: the heap free
    here plus what the host's emulated radios took at their import
    (`radio_emulation`: the Python stand-ins for the C modules `bluetooth`
    and `espnow` that a board has built in, whose import costs a board no
    heap). What the emulations allocate once running (their sockets to the
    medium, their connection state) stays counted: a board's C modules
    keep state of their own."""
    return mem["free"] + ((mem.get("parts") or {}).get("radio_emulation") or 0)


def steady(res, n):
    """The node's samples from the first one with its peers and routes full."""
    s = res.samples[n]
    for i, (t, free, total, occ) in enumerate(s):
        if all(occ[x][0] == occ[x][1] for x in ("peers", "routes")):
            return s[i:]
    return []


def problems(res):
    """Everything the acceptance criteria forbid, as readable lines."""
    out = []
    for n in res.names:
        if not res.alive[n]:
            out.append("%s: died" % n)
        if res.status[n]["uptime_s"] < res.up0[n] + int(res.seconds) - 1:
            out.append("%s: restarted (uptime %s)" % (n, res.status[n]["uptime_s"]))
        text = res.logs[n] + res.errs[n]
        if "MemoryError" in text or "out of memory" in res.logs[n]:
            out.append("%s: MemoryError: %s" % (n, text[-500:]))
        s = res.stats[n]
        if s["links"]["oom"] or s["console"]["oom"]:
            out.append("%s: out of memory survived: links %s console %s" % (n, s["links"]["oom"], s["console"]["oom"]))
        if s["drops"].get("no_memory", 0):
            out.append("%s: %d frames dropped for no_memory" % (n, s["drops"]["no_memory"]))
        for t in TABLES:
            if res.peak[(n, t)] != res.cap[t]:
                out.append("%s: table %s never full (peak %d of %d)" % (n, t, res.peak[(n, t)], res.cap[t]))
        for t in ("pending", "reassembling") if getattr(res, "datagrams", False) else ():
            if res.peak.get((n, "dgram_" + t), 0) != res.dgram_cap[t]:
                out.append("%s: datagram %s never full (peak %d of %d)"
                           % (n, t, res.peak.get((n, "dgram_" + t), 0), res.dgram_cap[t]))
        if getattr(res, "telemetry", None) and not res.tele_rx.get(n):
            out.append("%s: none of its telemetry reached the sink" % n)
        st = steady(res, n)
        if not st:
            out.append("%s: peers and routes never full at a sample" % n)
        for t, free, total, occ in st:
            if free < MIN_FREE * total:
                out.append("%s: %d of %d B free (%.1f %%) at %.0f s, need %d %%"
                           % (n, free, total, 100.0 * free / total, t, MIN_FREE * 100))
                break
    return out


def worst_free(res):
    """(lowest free share over every node's steady samples, in %, node)."""
    worst = None
    for n in res.names:
        for t, free, total, occ in steady(res, n) or res.samples[n]:
            v = 100.0 * free / total
            if worst is None or v < worst[0]:
                worst = (v, n)
    return worst


def report(res):
    """Printable lines: per node free heap, lowest sample, parts."""
    lines = ["%s on %s, heap %s, %d s, scripted peers sent %s, pings %d/%d%s"
             % (res.profile, os.path.basename(res.binary), res.heap, res.seconds, res.sent,
                res.pings[1], res.pings[0],
                " (%d without a console reply in 30 s)" % res.pings[2] if res.pings[2] else "")]
    for n in res.names:
        f = res.final[n]
        ff = board_free(f)
        emu = ff - f["free"]
        lows = [s[1] for s in res.samples[n]] or [ff]
        lines.append("  %s: free %d of %d B (%.1f %%), lowest sample %d B (%.1f %%), largest free block %s B; "
                     "occupancy %s" % (n, ff, f["heap"], 100.0 * ff / f["heap"], min(lows),
                                       100.0 * min(lows) / f["heap"], f.get("largest_free"),
                                       res.stats[n]["occupancy"]))
        if emu:
            lines.append("     (free on a board: %d B free here + %d B the emulated radios' import took)"
                         % (f["free"], emu))
        dg = res.stats[n].get("datagrams") or {}
        if getattr(res, "datagrams", False):
            lines.append("     datagrams: pending peak %s of %s, reassembling peak %s of %s; sent %s delivered %s "
                         "failed %s received %s reassembly refused %s"
                         % (res.peak.get((n, "dgram_pending")), res.dgram_cap["pending"],
                            res.peak.get((n, "dgram_reassembling")), res.dgram_cap["reassembling"],
                            dg.get("sent"), dg.get("delivered"),
                            sum(v for k2, v in dg.items() if k2.startswith("failed_")), dg.get("received"),
                            dg.get("reasm_refused")))
        if getattr(res, "telemetry", None):
            lines.append("     telemetry to the sink: %s; datagrams received there %d%s"
                         % (res.stats[n].get("telemetry"), res.tele_rx.get(n, 0),
                            " (%d did not decode, every node)" % res.tele_bad if res.tele_bad else ""))
        parts = f.get("parts") or {}
        lines.append("     used %d B: %s" % (f["used"], ", ".join(
            "%s %d" % kv for kv in sorted(parts.items(), key=lambda kv: -kv[1]))))
    return lines


def main(argv):
    """python bench/heap_scenario.py PROFILE frozen|stock HEAP [SECONDS] [--datagrams] [--telemetry]:
    runs the scenario (with the datagram layer in use), prints the report;
    exit status 1 if it fails."""
    import sys
    import tempfile
    dgrams = "--datagrams" in argv
    tele = 5.0 if "--telemetry" in argv else None
    argv = [a for a in argv if a not in ("--datagrams", "--telemetry")]
    if len(argv) not in (3, 4) or argv[1] not in ("frozen", "stock"):
        sys.stderr.write("usage: heap_scenario.py PROFILE frozen|stock HEAP [SECONDS]\n")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        res = run(argv[0], argv[1], argv[2], float(argv[3]) if len(argv) > 3 else 60.0, tmp,
                  datagrams=dgrams, telemetry=tele)
    print("\n".join(report(res)))
    worst = worst_free(res)
    print("lowest free share with every table full: %.1f %% (node %s)" % worst)
    for e in res.errors:
        print("FAIL " + e)
    return 1 if res.errors else 0


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
