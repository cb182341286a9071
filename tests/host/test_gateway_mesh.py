"""`snakemesh gateway` with a process mesh of the demo topology (Wi-Fi and
BLE links) and a real MQTT broker (Debian's mosquitto, `make mosquitto`)
on a loopback port with a config file of the test's own (issue 26):

- every node's telemetry reaches the gateway's capture over the mesh,
  with no sink configured (the gateway's key makes it the root, and nodes
  send to a gateway-keyed root), and every node's telemetry is on MQTT;
- a datagram a node sends to the gateway's key is published on
  snakemesh/up/<src>/<service>; one published on a node's downlink topic
  arrives at its recv and its ack is published;
- bad downlink topics and an unreachable broker are one line each;
- the broker stopped and started again: the gateway reconnects, the
  capture keeps every node's records meanwhile, and it says how many
  messages it could not publish."""
import json
import os
import shutil
import subprocess
import threading
import time

import pytest

from host_tools.procmesh.mesh import ProcessMesh
from host_tools.procmesh.nodeproc import free_port
from host_tools.commands.demo import DEMO_TOPOLOGY
from ptyproc import snakemesh as at_terminal

MOSQUITTO = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else None)
pytestmark = pytest.mark.skipif(MOSQUITTO is None, reason="mosquitto missing: `make mosquitto` installs it")


class Broker(object):
    def __init__(self, d, port):
        self.conf = os.path.join(d, "mosquitto.conf")
        with open(self.conf, "w") as f:
            f.write("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n" % port)
        self.port = port
        self.log = os.path.join(d, "mosquitto.log")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([MOSQUITTO, "-c", self.conf], stdout=open(self.log, "a"),
                                     stderr=subprocess.STDOUT)
        end = time.monotonic() + 10
        import socket
        while time.monotonic() < end:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError("mosquitto did not listen on %d: %s" % (self.port, open(self.log).read()))

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


class Subscriber(object):
    def __init__(self, port):
        import paho.mqtt.client as mqtt
        self.msgs = []
        self.lock = threading.Lock()
        self.ready = threading.Event()
        c = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2, client_id="test-sub-%d" % os.getpid())

        def on_connect(client, userdata, flags, rc, props=None):
            client.subscribe("snakemesh/#", qos=1)

        def on_subscribe(client, userdata, mid, rcs, props=None):
            self.ready.set()

        def on_message(client, userdata, msg):
            with self.lock:
                self.msgs.append((msg.topic, bytes(msg.payload)))
        c.on_connect = on_connect
        c.on_subscribe = on_subscribe
        c.on_message = on_message
        c.reconnect_delay_set(1, 2)
        c.connect_async("127.0.0.1", port, keepalive=10)
        c.loop_start()
        self.c = c
        assert self.ready.wait(10), "the test's subscriber did not subscribe"

    def topics(self, prefix):
        with self.lock:
            return [(t, p) for t, p in self.msgs if t.startswith(prefix)]

    def stop(self):
        self.c.disconnect()
        self.c.loop_stop()


def _capture(d):
    recs = []
    for name in sorted(os.listdir(d)):
        if name.startswith("telemetry-") and name.endswith(".jsonl"):
            with open(os.path.join(d, name)) as f:
                recs += [json.loads(line) for line in f if line.strip()]
    return recs


def _until(h, cond, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        h._pump(0.2)          # keep reading the gateway's terminal (its output must not block)
        v = cond()
        if v:
            return v
    raise AssertionError("%s not within %g s; gateway said:\n%s" % (what, timeout, h.text[-3000:]))


@pytest.fixture
def broker(tmp_path):
    """A mosquitto on a loopback port, stopped however the test ends (a test
    that fails before its own cleanup must not leave a broker running)."""
    b = Broker(str(tmp_path), free_port())
    try:
        yield b.start()
    finally:
        b.stop()


def test_gateway_collects_over_the_mesh_and_bridges_to_mqtt(tmp_path, broker):
    gw_dir = str(tmp_path / "gw")
    gw_port = free_port()
    sub = Subscriber(broker.port)
    h = at_terminal("gateway", "--out", gw_dir, "--listen", "127.0.0.1:%d" % gw_port, "--no-multicast",
                    "--mqtt", "127.0.0.1:%d" % broker.port, "--interval", "2")
    mesh = None
    try:
        gw_key = h.expect(r"node ([0-9a-f]{64})\n", 60).group(1)
        assert gw_key.startswith("ffff")            # a gateway key: the tree's root
        h.expect(r"mqtt: connected to 127\.0\.0\.1:%d" % broker.port, 20)
        # no sink configured anywhere: nodes find the gateway by its key
        args = dict((n, ["--telemetry", "2"]) for n in ("alpha", "bravo", "charlie", "delta", "echo",
                                                        "foxtrot", "golf", "hotel"))
        args["alpha"] += ["--connect", "127.0.0.1:%d" % gw_port]
        mesh = ProcessMesh(DEMO_TOPOLOGY, str(tmp_path / "mesh"), seed=3, node_args=args)
        mesh.start()
        t0 = time.monotonic()
        keys = set(mesh.hexkey(n) for n in mesh.names)

        def heard():
            got = set(r["node"] for r in _capture(gw_dir) if r.get("kind") == "state")
            return keys <= got
        _until(h, heard, 60, "every node's state record in the capture")
        assert time.monotonic() - t0 <= 60
        recs = _capture(gw_dir)
        for k in keys:
            kinds = set(r["kind"] for r in recs if r["node"] == k)
            assert {"state", "counters"} <= kinds, (k[:8], kinds)
        assert any(r["node"] == gw_key for r in recs)        # the gateway's own records
        nodes = json.load(open(os.path.join(gw_dir, "nodes.json")))
        assert keys <= set(nodes)
        _until(h, lambda: keys <= set(t.rsplit("/", 1)[1] for t, _ in sub.topics("snakemesh/telemetry/")),
               20, "every node's telemetry on MQTT")
        for t, p in sub.topics("snakemesh/telemetry/"):
            rec = json.loads(p.decode("utf-8"))
            assert rec["node"] == t.rsplit("/", 1)[1] and rec["v"] == 1

        # uplink: golf (a BLE spur) sends to the gateway's key
        r = mesh.request("golf", "send %s 40 1 %s" % (gw_key, b"21.5 C".hex()), timeout=40)
        assert r.get("state") == "delivered", r
        up = "snakemesh/up/%s/40" % mesh.hexkey("golf")
        _until(h, lambda: sub.topics(up), 10, "the uplink datagram on MQTT")
        assert sub.topics(up)[0][1] == b"21.5 C"

        # downlink: a message on hotel's topic arrives at its recv, the ack is published
        hotel = mesh.hexkey("hotel")
        assert mesh.request("hotel", "recv 41").get("ok") is not False
        sub.c.publish("snakemesh/down/%s/41" % hotel, b"valve open", qos=1)
        got = []
        end = time.monotonic() + 40
        while not got and time.monotonic() < end:
            h._pump(0.05)
            got = [o for o in mesh.nodes["hotel"].read_objects(0.3)
                   if isinstance(o, dict) and o.get("kind") == "datagram" and o.get("service") == 41]
        assert got and bytes.fromhex(got[0]["data_hex"]) == b"valve open" and got[0]["src"] == gw_key
        ack = "snakemesh/ack/%s/41" % hotel
        _until(h, lambda: sub.topics(ack), 30, "the downlink's ack")
        assert sub.topics(ack)[0][1] == b"delivered"
        # a key not in the mesh: the ack says why it failed
        stranger = "ab" * 32
        sub.c.publish("snakemesh/down/%s/41" % stranger, b"x", qos=1)
        _until(h, lambda: sub.topics("snakemesh/ack/%s/41" % stranger), 40, "the failed downlink's ack")
        assert sub.topics("snakemesh/ack/%s/41" % stranger)[0][1].startswith(b"failed: ")

        # bad downlink topics: one line each, counted, the gateway runs on
        sub.c.publish("snakemesh/down/zz/41", b"x", qos=1)
        h.expect(r"downlink 'snakemesh/down/zz/41' ignored: the key is not 64 hex digits \(1 so far\)", 10)
        sub.c.publish("snakemesh/down/%s/99999" % hotel, b"x", qos=1)
        h.expect(r"ignored: the service is not 0\.\.65535 \(2 so far\)", 10)

        # the broker goes away and comes back: nothing lost on disk, the gap is said
        broker.stop()
        h.expect(r"mqtt: lost the broker", 20)
        t_down = time.time()
        time.sleep(8)
        t_up = time.time()
        broker.start()
        m = h.expect(r"mqtt: reconnected to 127\.0\.0\.1:%d; (\d+) message\(s\) could not be published" %
                     broker.port, 30)
        assert int(m.group(1)) > 0
        recs = _capture(gw_dir)
        for k in keys:
            during = [r for r in recs if r["node"] == k and t_down < r["t"] < t_up]
            assert during, "no record of %s while the broker was away" % k[:8]
        h.interrupt()
        m = h.expect(r"gateway: (\d+) records from (\d+) node\(s\).*downlink 2 \(1 delivered, 1 failed\); "
                     r"0 bad telemetry, 2 bad downlink; mqtt: (\d+) published, (\d+) not published", 30)
        assert int(m.group(2)) == len(keys) + 1 and int(m.group(4)) > 0
        assert h.wait(15) == 0
        assert "Traceback" not in h.text
    finally:
        if mesh is not None:
            mesh.stop()
        h.close()
        sub.stop()


def test_unreachable_broker_is_one_line_and_the_capture_goes_on(tmp_path):
    gw_dir = str(tmp_path / "gw")
    dead = free_port()
    with at_terminal("gateway", "--out", gw_dir, "--no-multicast", "--mqtt", "127.0.0.1:%d" % dead,
                     "--interval", "1", "--duration", "12") as h:
        h.expect(r"mqtt: cannot reach broker 127\.0\.0\.1:%d \([^)]*\); retrying, capture continues" % dead, 30)
        h.expect(r"gateway: (\d+) records", 40)
        assert h.wait(15) == 0
        assert h.text.count("cannot reach broker") == 1        # said once, not per retry
        assert "Traceback" not in h.text
    assert len(_capture(gw_dir)) > 0
