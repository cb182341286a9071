"""Process mesh: one MicroPython unix-port firmware process per node of a
topology, inspected through each node's console exactly like a board.

    with ProcessMesh(topology_file, out_dir) as m:   # starts everything
        m.wait_converged(timeout=90)                  # root agreed, snake complete
        m.ping("a", "d"); m.trace("a", "d")           # through a's console
        m.record(seconds=10)                          # telemetry -> out_dir
    # every process (nodes, BLE medium) is stopped here, also on Ctrl-C

Links: a Wi-Fi edge is a TCP link over loopback (the higher-indexed node
dials the other's static listener: link type "remote"; multicast discovery
is off so the mesh has exactly the topology's links); a `@ble` edge goes
through the emulated BLE radio medium (host_tools/blemu), which only lets
nodes that share a `@ble` edge hear each other. A pair may have both.

Outputs in out_dir: telemetry.jsonl (the nodes' telemetry records, probe
records for every ping/trace the mesh ran, one topology record),
topology.txt, nodes.json (name -> key, console path), and logs/ (each
node's console output that was not protocol).
"""
import binascii
import json
import os
import subprocess
import sys
import tempfile
import time

from host_tools.errors import CliError, InputError
from host_tools.procmesh.nodeproc import NodeProcess, free_port
from host_tools.sim import topology as T
from host_tools.sim.keys import policy_in_force, policy_seed

LINK_NAMES = ("wifi", "ble", "remote", "espnow")


def parse_topology(path):
    """Names in order and edges {(a, b, link)} from the shared topology
    format plus `@link` tokens (other `@` options are ignored here). Unlike
    the simulator, the same pair may appear once per link type."""
    try:
        text = open(path).read()
    except OSError as e:
        raise InputError("cannot read topology %s: %s" % (path, e.strerror))
    names = []
    edges = []
    seen = set()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        link = "wifi"
        chain = []
        for tok in line.split():
            if tok.startswith("@"):
                opt = tok[1:]
                if "=" not in opt:
                    if opt not in LINK_NAMES:
                        raise InputError("%s:%d: unknown link type @%s (process mesh: @wifi, @ble, "
                                         "@espnow or @remote)" % (path, lineno, opt))
                    link = opt
                else:
                    # simulator options (latency, bw, loss): checked, not used here
                    try:
                        T._parse_option(tok, {}, path, lineno)
                    except T.TopologyError as e:
                        raise InputError(str(e))
                continue
            chain.append(tok)
        for n in chain:
            if n not in names:
                names.append(n)
        for a, b in zip(chain, chain[1:]):
            if a == b:
                continue
            key = (min(a, b), max(a, b), link)
            if key not in seen:
                seen.add(key)
                edges.append((a, b, "remote" if link == "remote" else link))
    if len(names) < 2:
        raise InputError("topology %s has fewer than two nodes" % path)
    return names, edges


class ProcessMesh(object):
    def __init__(self, topology, out_dir, seed=1, profile="UNIX", ble_latency_ms=5.0,
                 heapsize=None, log=None, mpy=False, hub_profile=None, node_profiles=None,
                 micropython=None, gateway_root=False, root_node=None, espnow_loss=0.0,
                 espnow_latency_ms=2.0, espnow_retries=2, node_args=None):
        self.topology_path = topology
        self.names, self.edges = parse_topology(topology)
        self.out_dir = out_dir
        self.seed = seed
        self.profile = profile
        # per node: the base profile, the hub profile where a node has more
        # links than the base max_peers, single-node settings (as `sim`)
        from host_tools.sim import profiles as PR
        degree = {n: 0 for n in self.names}
        for a, b, _ in self.edges:
            degree[a] += 1
            degree[b] += 1
        try:
            self.node_profiles = PR.assign(self.names, degree.__getitem__, profile or "UNIX",
                                           hub_profile, node_profiles)
        except PR.ProfileSpecError as e:
            raise InputError(str(e))
        self.ble_latency_ms = ble_latency_ms
        self.espnow_loss = espnow_loss
        self.espnow_latency_ms = espnow_latency_ms
        self.espnow_retries = espnow_retries
        self.espnow = None       # the ESP-NOW medium process
        self.espnow_addr = None
        self.node_args = node_args or {}     # name -> extra firmware arguments (--app FILE, --config F)
        # keys of nodes outside this mesh's processes that join it (a
        # gateway): convergence counts them in the root and the snake
        self.outside = []
        self.datagrams = 0
        self.heapsize = heapsize
        self.mpy = mpy            # run the firmware compiled to .mpy, as on a board
        self.micropython = micropython   # interpreter binary (None: the venv's micropython)
        self.mpy_dir = None
        self.log = log or (lambda msg: None)
        self.nodes = {}          # name -> NodeProcess
        self.keys = {}           # name -> key bytes
        self.medium = None
        self.medium_addr = None
        self._tmp = None
        self._tel = None
        self.t0 = None
        self.probes = 0
        # node keys as `sim` draws them; gateway_root: with the policy "a
        # gateway is the root" (root-candidate profiles above every other)
        from host_tools import keystore
        from snake.crypto import Signer
        loaded = {}
        for spec in set([profile or "UNIX", hub_profile] + list(self.node_profiles.values())):
            if spec is not None:
                loaded[spec] = PR.load(spec)
        policy = bool(gateway_root)
        if policy and not policy_in_force(loaded.values()):
            raise InputError("--gateway-root needs a root-candidate profile (GATEWAY) in the mesh: "
                             "--hub-profile GATEWAY or --node-profile NAME=GATEWAY")
        if root_node is not None and root_node not in self.names:
            raise InputError("profile map: the root %r is no node of the topology" % (root_node,))
        self.seeds = {}          # name -> 32-byte seed
        for n in self.names:
            if root_node is not None:       # a profile map's root: the only root candidate
                root = n == root_node
            else:
                root = keystore.is_root_candidate(loaded[self.profile_of(n) or "UNIX"]) if policy else None
            s = self.seeds[n] = policy_seed(str(seed), n, root)
            self.keys[n] = Signer(s).public

    # -- lifecycle -----------------------------------------------------------
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def profile_of(self, name):
        """The profile (board name or path) node `name` runs."""
        return self.node_profiles.get(name, self.profile)

    def hexkey(self, name):
        return binascii.hexlify(self.keys[name]).decode()

    def name_of(self, hexkey):
        for n in self.names:
            if self.hexkey(n) == hexkey:
                return n
        return hexkey[:8] if hexkey else None

    def start(self, boot_timeout=30.0):
        os.makedirs(os.path.join(self.out_dir, "logs"), exist_ok=True)
        self._tmp = tempfile.TemporaryDirectory(prefix="snakemesh-mesh-")
        if self.mpy:
            from host_tools.procmesh.nodeproc import build_mpy
            self.mpy_dir = build_mpy(os.path.join(self._tmp.name, "mpy"))
        self.t0 = time.time()
        self._tel = open(os.path.join(self.out_dir, "telemetry.jsonl.part"), "w")
        ble_edges = [(a, b) for a, b, l in self.edges if l == "ble"]
        ble_nodes = set()
        if ble_edges:
            topo = os.path.join(self._tmp.name, "ble-topology.txt")
            with open(topo, "w") as f:
                for a, b in ble_edges:
                    f.write("%s %s @ble\n" % (a, b))
                    ble_nodes.update((a, b))
            self._start_medium(topo)
        now_edges = [(a, b) for a, b, l in self.edges if l == "espnow"]
        now_nodes = set()
        if now_edges:
            topo = os.path.join(self._tmp.name, "espnow-topology.txt")
            with open(topo, "w") as f:
                for a, b in now_edges:
                    f.write("%s %s @espnow\n" % (a, b))
                    now_nodes.update((a, b))
            self._start_espnow(topo)
        listen = {n: ("127.0.0.1", free_port()) for n in self.names}
        index = {n: i for i, n in enumerate(self.names)}
        connect = {n: [] for n in self.names}
        for a, b, link in self.edges:
            if link in ("ble", "espnow"):
                continue
            lo, hi = (a, b) if index[a] < index[b] else (b, a)
            connect[hi].append(listen[lo])
        self._spec = {}
        for n in self.names:
            self._spec[n] = dict(seed=self.seeds[n], listen=listen[n], connect=connect[n],
                                 multicast=False, profile=self.profile_of(n), heapsize=self.heapsize,
                                 mpy_dir=self.mpy_dir, micropython=self.micropython, ble_medium=self.medium_addr if n in ble_nodes else None, ble_name=n,
                                 espnow_medium=self.espnow_addr if n in now_nodes else None,
                                 extra_args=list(self.node_args.get(n, ())))
            self._launch(n, boot_timeout)
            node = self.nodes[n]
            self.log("node %-10s up  %s  console %s" % (n, node.pubkey[:16], node.pty_path))
        self._write_topology()

    def _launch(self, n, boot_timeout=30.0):
        err = open(os.path.join(self.out_dir, "logs", n + ".stderr"), "a")
        node = NodeProcess(stderr=err, **self._spec[n])
        self.nodes[n] = node
        node.start(timeout=boot_timeout)
        return node

    def kill(self, name):
        """kill -9 the node's process (a crash: no goodbye on its links)."""
        node = self.nodes[name]
        if node.proc is not None and node.proc.poll() is None:
            os.kill(node.proc.pid, 9)
            node.proc.wait(5)
        node.stop()

    def restart(self, name, boot_timeout=30.0):
        """Start a crashed or stopped node again with the same key and links."""
        old = self.nodes.get(name)
        if old is not None:
            old.stop()
        return self._launch(name, boot_timeout)

    def _start_medium(self, topo):
        cmd = [sys.executable, "-m", "host_tools.blemu.medium", "--topology", topo, "--port", "0",
               "--latency-ms", str(self.ble_latency_ms)]
        from host_tools import REPO_ROOT
        self.medium = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                       stderr=open(os.path.join(self.out_dir, "logs", "ble-medium.stderr"), "w"),
                                       text=True)
        line = self.medium.stdout.readline()
        if "listening on" not in line:
            raise CliError("the emulated BLE medium did not start (see %s)"
                           % os.path.join(self.out_dir, "logs", "ble-medium.stderr"))
        self.medium_addr = line.strip().rsplit(" ", 1)[1]
        self.log("ble medium on %s (%d BLE links)" % (self.medium_addr,
                                                      sum(1 for e in self.edges if e[2] == "ble")))

    def _start_espnow(self, topo):
        cmd = [sys.executable, "-m", "host_tools.espnowemu.medium", "--topology", topo, "--port", "0",
               "--latency-ms", str(self.espnow_latency_ms), "--loss", str(self.espnow_loss),
               "--retries", str(self.espnow_retries),
               "--seed", str(self.seed if isinstance(self.seed, int) else 1)]
        from host_tools import REPO_ROOT
        errf = os.path.join(self.out_dir, "logs", "espnow-medium.stderr")
        self.espnow = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                       stderr=open(errf, "w"), text=True)
        line = self.espnow.stdout.readline()
        if "listening on" not in line:
            raise CliError("the emulated ESP-NOW medium did not start (see %s)" % errf)
        self.espnow_addr = line.strip().rsplit(" ", 1)[1]
        self.log("espnow medium on %s (%d ESP-NOW links, loss %g)"
                 % (self.espnow_addr, sum(1 for e in self.edges if e[2] == "espnow"), self.espnow_loss))

    def espnow_ctl(self, command):
        """A control command to the ESP-NOW medium (cut A B, link A B, stats, ...)."""
        import socket
        import struct
        host, port = self.espnow_addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=5)
        try:
            body = command.encode()
            s.sendall(struct.pack(">HB", len(body) + 1, 32) + body)
            buf = b""
            while True:
                d = s.recv(65536)
                if not d:
                    raise CliError("the ESP-NOW medium closed the control connection")
                buf += d
                if len(buf) >= 3 and len(buf) >= 2 + ((buf[0] << 8) | buf[1]):
                    return json.loads(buf[3:2 + ((buf[0] << 8) | buf[1])].decode())
        finally:
            s.close()

    def stop(self):
        for n, node in list(self.nodes.items()):
            try:
                for line in node.lines:
                    pass
                node.stop()
            except Exception:
                pass
        if self.medium is not None:
            if self.medium.poll() is None:
                self.medium.terminate()
                try:
                    self.medium.wait(5)
                except subprocess.TimeoutExpired:
                    self.medium.kill()
                    self.medium.wait(5)
            self.medium = None
        if self.espnow is not None:
            if self.espnow.poll() is None:
                self.espnow.terminate()
                try:
                    self.espnow.wait(5)
                except subprocess.TimeoutExpired:
                    self.espnow.kill()
                    self.espnow.wait(5)
            self.espnow.stdout.close()
            self.espnow = None
        if self._tel is not None:
            self._tel.close()
            self._tel = None
            part = os.path.join(self.out_dir, "telemetry.jsonl.part")
            # complete runs only: the file is renamed when the mesh stops
            # normally; an interrupted run keeps the .part name
            os.replace(part, os.path.join(self.out_dir, "telemetry.jsonl"))
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def pids(self):
        out = [n.proc.pid for n in self.nodes.values() if n.proc is not None]
        if self.medium is not None:
            out.append(self.medium.pid)
        if self.espnow is not None:
            out.append(self.espnow.pid)
        return out

    # -- output --------------------------------------------------------------
    def _emit(self, rec):
        if self._tel is not None:
            self._tel.write(json.dumps(rec, sort_keys=True) + "\n")

    def _write_topology(self):
        names = {self.hexkey(n): n for n in self.names}
        edges = [[self.hexkey(a), self.hexkey(b), link] for a, b, link in self.edges]
        self._emit({"v": 1, "kind": "topology", "t": round(time.time(), 3),
                    "node": self.hexkey(self.names[0]), "edges": edges, "names": names})
        with open(os.path.join(self.out_dir, "topology.txt"), "w") as f:
            for a, b, link in self.edges:
                f.write("%s %s%s\n" % (a, b, "" if link == "wifi" else " @" + link))
        with open(os.path.join(self.out_dir, "nodes.json"), "w") as f:
            json.dump({n: {"key": self.hexkey(n), "console": self.nodes[n].pty_path}
                       for n in self.names}, f, indent=1, sort_keys=True)

    # -- console -------------------------------------------------------------
    def request(self, name, command, timeout=15.0):
        node = self.nodes[name]
        recs = []
        reply = node.request(command, timeout=timeout, records=recs)
        for r in recs:
            if isinstance(r, dict) and "v" in r:
                self._emit(r)
        if reply is None:
            raise CliError("node %s did not answer %r within %g s" % (name, command, timeout))
        return reply

    def status(self, timeout=15.0):
        return {n: self.request(n, "status", timeout=timeout) for n in self.names}

    def converged(self, timeout=15.0):
        """(tree agreed, snake complete, detail) from every node's status."""
        st = self.status(timeout)
        keys = sorted(list(self.keys.values()) + [bytes(k) for k in self.outside])
        want_root = binascii.hexlify(keys[-1]).decode()
        agree = sum(1 for s in st.values() if s.get("ok") and s.get("root") == want_root)
        right = 0
        for n in self.names:
            k = self.keys[n]
            i = keys.index(k)
            want = binascii.hexlify(keys[i - 1]).decode() if i > 0 else None
            if st[n].get("desc") == want:
                right += 1
        self.agreement = (agree, right)     # nodes on the right root; with the right snake neighbour
        return agree == len(st), right == len(self.names), st

    def wait_converged(self, timeout=120.0, progress=None, request_timeout=15.0):
        end = time.monotonic() + timeout
        t_tree = t_snake = None
        start = time.monotonic()
        next_note = start + 5
        while True:
            tree, snake, _ = self.converged(request_timeout)
            now = time.monotonic()
            if progress and now >= next_note and not (tree and snake):
                next_note = now + 5
                progress("still waiting after %.0f s: %d of %d nodes agree on the root, %d have their "
                         "snake neighbour" % (now - start, self.agreement[0], len(self.names),
                                              self.agreement[1]))
            if tree and t_tree is None:
                t_tree = now - start
                if progress:
                    progress("root agreed by all %d nodes after %.1f s" % (len(self.names), t_tree))
            if tree and snake:
                t_snake = now - start
                if progress:
                    progress("snake complete after %.1f s" % t_snake)
                return t_tree, t_snake
            if now > end:
                raise CliError("mesh did not converge within %g s (tree %s, snake %s)"
                               % (timeout, "ok" if tree else "not agreed", "ok" if snake else "incomplete"))
            time.sleep(0.5)

    def ping(self, a, b, count=1, timeout=20.0):
        r = self.request(a, "ping %s %d" % (self.hexkey(b), count), timeout=timeout)
        self.probes += 1
        rtts = r.get("rtts_ms") or []
        ok = bool(r.get("ok")) and r.get("received", 0) > 0
        self._emit({"v": 1, "kind": "probe", "t": round(time.time(), 3), "node": self.hexkey(a),
                    "probe": "ping", "id": self.probes, "src": self.hexkey(a), "dst": self.hexkey(b),
                    "ok": ok, "rtt_ms": (sum(rtts) / len(rtts)) if rtts else None,
                    "hops": None, "path": None})
        return r

    def send(self, a, b, data=b"", service=0, ack=True, timeout=40.0):
        """A datagram from node a to node b (console `send`; data up to 100
        bytes); its outcome goes to the telemetry as a probe record with
        probe "datagram" (ok = delivered, rtt_ms, state, reason: what
        `analyze` measures)."""
        r = self.request(a, "send %s %d %d %s" % (self.hexkey(b), service, 1 if ack else 0,
                                                  bytes(data).hex()), timeout=timeout)
        self.datagrams += 1
        self._emit({"v": 1, "kind": "probe", "probe": "datagram", "t": round(time.time(), 3),
                    "node": self.hexkey(a), "id": self.datagrams, "src": self.hexkey(a), "dst": self.hexkey(b),
                    "ok": r.get("state") == "delivered", "hops": None, "path": None,
                    "rtt_ms": r.get("rtt_ms") if r.get("state") == "delivered" else None,
                    "service": service, "ack": bool(ack), "len": len(data), "state": r.get("state"),
                    "reason": r.get("reason")})
        return r

    def trace(self, a, b, timeout=30.0):
        r = self.request(a, "trace %s" % self.hexkey(b), timeout=timeout)
        self.probes += 1
        hops = r.get("hops") or []
        reached = bool(r.get("reached", r.get("ok")))
        path = [self.hexkey(a)] + [h.get("key") for h in hops]
        self._emit({"v": 1, "kind": "probe", "t": round(time.time(), 3), "node": self.hexkey(a),
                    "probe": "trace", "id": self.probes, "src": self.hexkey(a), "dst": self.hexkey(b),
                    "ok": reached, "rtt_ms": hops[-1].get("rtt_ms") if (hops and reached) else None,
                    "hops": len(hops) if reached else None, "path": path if reached else None})
        return r

    def telemetry(self, interval):
        """Ask every node to stream telemetry every `interval` s (0: off)."""
        for n in self.names:
            self.request(n, "telemetry %d" % interval if interval else "telemetry off")

    def drain(self, seconds):
        """Copy the telemetry the nodes stream into telemetry.jsonl for
        `seconds`."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for n in self.names:
                for obj in self.nodes[n].read_objects(0.05):
                    if isinstance(obj, dict) and "v" in obj:
                        self._emit(obj)

    def record(self, seconds, interval=1):
        """Stream every node's telemetry for `seconds` into telemetry.jsonl."""
        self.telemetry(interval)
        self.drain(seconds)
        self.telemetry(0)
