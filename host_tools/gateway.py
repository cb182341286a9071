"""The gateway's parts (`snakemesh gateway`, host_tools/commands/gateway.py):
telemetry arriving over the mesh as datagrams becomes the JSON-lines
records `monitor` writes, in rotating files with a nodes.json of who was
heard when; with a broker, an MQTT bridge (paho-mqtt).

Telemetry datagrams (service telesink.SERVICE) are what
firmware/snake/runtime/telesink.py sends: the records of a period in a
binary form (CBOR with the field names of telesink.NAMES as indices,
decode()), each whole or a delta (only the fields that changed, merged here
into the last record of that node and kind, objects entry by entry), a
record larger than a datagram in parts. A payload starting with "{" is
the JSON of a node on older firmware (one record or a part of one, `"d":1`
a delta, `"m":1` more parts follow). docs/guides/GATEWAY.md describes both
for users.
"""
import binascii
import json
import os
import threading
import time

from snake.runtime.telesink import SERVICE, FORMAT, F_DELTA, F_MORE, NAMES
SCHEMA_VERSION = 1
ROTATE_BYTES = 8 * 1024 * 1024
FILE_PREFIX = "telemetry-"


def _hex64(s):
    if not isinstance(s, str) or len(s) != 64:
        return False
    try:
        binascii.unhexlify(s)
    except (binascii.Error, ValueError):
        return False
    return True


class Capture(object):
    """The records on disk: DIR/telemetry-NNNN.jsonl, a new file every
    rotate_bytes; DIR/nodes.json {key: {first, last, records}}, rewritten
    (atomically) when a node is first heard, else at most every second,
    and on close."""

    def __init__(self, out_dir, rotate_bytes=ROTATE_BYTES):
        self.dir = out_dir
        os.makedirs(out_dir, exist_ok=True)
        self.rotate_bytes = rotate_bytes
        self.lock = threading.Lock()
        self.nodes = {}
        self.records = 0
        self.index = 0
        for name in os.listdir(out_dir):
            if name.startswith(FILE_PREFIX) and name.endswith(".jsonl"):
                try:
                    self.index = max(self.index, int(name[len(FILE_PREFIX):-6]) + 1)
                except ValueError:
                    pass
        self.f = None
        self.size = 0
        self.nodes_written = 0.0
        self._open()

    def _open(self):
        if self.f is not None:
            self.f.close()
        self.path = os.path.join(self.dir, "%s%04d.jsonl" % (FILE_PREFIX, self.index))
        self.index += 1
        self.f = open(self.path, "a", encoding="utf-8")
        self.size = 0

    def write(self, rec):
        line = json.dumps(rec, separators=(",", ":")) + "\n"
        with self.lock:
            if self.size and self.size + len(line) > self.rotate_bytes:
                self._open()
            self.f.write(line)
            self.f.flush()
            self.size += len(line)
            self.records += 1
            key = rec.get("node")
            t = rec.get("t")
            n = self.nodes.get(key)
            new = n is None
            if new:
                n = self.nodes[key] = {"first": t, "last": t, "records": 0}
            n["last"] = t
            n["records"] += 1
            # a node heard for the first time is in nodes.json at once
            if new or time.time() - self.nodes_written >= 1.0:
                self._write_nodes()

    def _write_nodes(self):
        tmp = os.path.join(self.dir, "nodes.json.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.nodes, f, indent=1, sort_keys=True)
        os.replace(tmp, os.path.join(self.dir, "nodes.json"))
        self.nodes_written = time.time()

    def close(self):
        with self.lock:
            self._write_nodes()
            if self.f is not None:
                self.f.close()
                self.f = None

    def files(self):
        return sorted(os.path.join(self.dir, n) for n in os.listdir(self.dir)
                      if n.startswith(FILE_PREFIX) and n.endswith(".jsonl"))


class _Reader(object):
    """The CBOR subset telesink writes (RFC 8949): unsigned and negative
    integers, byte strings (hex text in the record), text, arrays, maps
    (definite and indefinite length), false, true, null, float64. Map keys
    that are integers name an entry of NAMES."""

    def __init__(self, data, pos=0):
        self.d = data
        self.p = pos

    def byte(self):
        if self.p >= len(self.d):
            raise ValueError("truncated")
        b = self.d[self.p]
        self.p += 1
        return b

    def take(self, n):
        if self.p + n > len(self.d):
            raise ValueError("truncated")
        v = self.d[self.p:self.p + n]
        self.p += n
        return v

    def head(self, ib=None):
        if ib is None:
            ib = self.byte()
        major, ai = ib >> 5, ib & 31
        if ai < 24:
            return major, ai
        if ai > 27:
            if ai == 31 and major in (4, 5, 7):
                return major, None           # indefinite length / break
            raise ValueError("bad CBOR head 0x%02x" % ib)
        return major, int.from_bytes(self.take(1 << (ai - 24)), "big")

    def name(self):
        major, n = self.head()
        if major == 0:
            if n >= len(NAMES):
                raise ValueError("unknown name index %d" % n)
            return NAMES[n]
        if major == 3 and n is not None:
            return self.take(n).decode("utf-8")
        raise ValueError("a name is an index or text")

    def at_break(self):
        if self.p < len(self.d) and self.d[self.p] == 0xFF:
            self.p += 1
            return True
        return False

    def map(self, n):
        out = {}
        while True:
            if n is None:
                if self.at_break():
                    return out
            elif len(out) >= n:
                return out
            k = self.name()
            out[k] = self.value()

    def value(self):
        ib = self.byte()
        if ib == 0xF6:
            return None
        if ib == 0xF5:
            return True
        if ib == 0xF4:
            return False
        if ib == 0xFB:
            import struct
            return struct.unpack(">d", self.take(8))[0]
        major, n = self.head(ib)
        if major == 0 and n is not None:
            return n
        if major == 1 and n is not None:
            return -1 - n
        if major == 2 and n is not None:
            return binascii.hexlify(self.take(n)).decode()
        if major == 3 and n is not None:
            return self.take(n).decode("utf-8")
        if major == 4:
            out = []
            while (len(out) < n) if n is not None else not self.at_break():
                out.append(self.value())
            return out
        if major == 5:
            return self.map(n)
        raise ValueError("unexpected CBOR item 0x%02x" % ib)


def decode(data):
    """A telemetry datagram of telesink's binary form -> (up, [(kind,
    fields, delta, more)]). ValueError: not one (UnicodeDecodeError for
    text that is not UTF-8)."""
    if not data or data[0] != FORMAT:
        raise ValueError("not a telemetry payload")
    r = _Reader(bytes(data), 1)
    major, up = r.head()
    if major != 0 or up is None:
        raise ValueError("no uptime")
    recs = []
    while r.p < len(r.d):
        flags = r.byte()
        kind = r.name()
        major, n = r.head()
        if major != 5:
            raise ValueError("a record's fields are a map")
        fields = r.map(n)
        recs.append((kind, fields, bool(flags & F_DELTA), bool(flags & F_MORE)))
    return up, recs


def _merge(held, delta):
    # a delta's object merges into the one held, entry by entry, at every depth
    out = dict(held)
    for k, v in delta.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            v = _merge(out[k], v)
        out[k] = v
    return out


class Assembler(object):
    """Telemetry datagrams -> whole records (deltas and parts merged)."""

    def __init__(self):
        self.last = {}       # (node, kind) -> fields of the last whole record
        self.open = {}       # (node, kind) -> fields gathered from parts so far

    def add(self, src, obj, now):
        """One datagram's JSON object from node src (hex): the whole
        record when this completes one, else None. ValueError: not a
        telemetry object."""
        if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
            raise ValueError("not a telemetry object (no kind)")
        fields = dict((f, v) for f, v in obj.items() if f not in ("kind", "d", "m"))
        return self.add_record(src, obj["kind"], fields, bool(obj.get("d")), bool(obj.get("m")), now)

    def add_datagram(self, src, data, now):
        """One binary telemetry datagram (decode()) -> the whole records it
        completes."""
        up, recs = decode(data)
        out = []
        for kind, fields, delta, more in recs:
            if "up" not in fields:
                fields["up"] = up
            rec = self.add_record(src, kind, fields, delta, more, now)
            if rec is not None:
                out.append(rec)
        return out

    def add_record(self, src, kind, fields, delta, more, now):
        k = (src, kind)
        cur = self.open.pop(k, None)
        if cur is None:
            cur = dict(self.last.get(k) or {}) if delta else {}
        if delta:
            cur = _merge(cur, fields)
        else:
            cur.update(fields)
        if more:
            self.open[k] = cur
            return None
        self.last[k] = cur
        rec = {"v": SCHEMA_VERSION, "kind": kind, "t": round(now, 3)}
        rec.update(cur)
        rec["node"] = src
        rec["host_t"] = round(now, 3)
        rec["port"] = "gateway"
        return rec


class Bridge(object):
    """The MQTT side (paho-mqtt): publish telemetry and uplink datagrams,
    take downlink messages to `down(key_hex, service, payload)`. While the
    broker is away nothing is published (the capture on disk has it all):
    the messages are counted and said in one line when it is back."""

    def __init__(self, host, port, say, down, client_id=None):
        import paho.mqtt.client as mqtt
        self.mqtt = mqtt
        self.host, self.port = host, port
        self.say = say
        self.down = down
        self.connected = False
        self.ever = False
        self.lock = threading.Lock()
        self.published = 0
        self.unpublished = 0          # since the broker went away
        self.unpublished_total = 0
        self.failures = 0             # connection attempts that failed
        self._said_fail = False
        c = mqtt.Client(callback_api_version=mqtt.CallbackAPIVersion.VERSION2,
                        client_id=client_id or "snakemesh-gw-%d" % os.getpid())
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_connect_fail = self._on_connect_fail
        c.on_message = self._on_message
        c.reconnect_delay_set(1, 4)
        self.c = c

    def start(self):
        try:
            self.c.connect_async(self.host, self.port, keepalive=10)
        except (OSError, ValueError) as e:
            self.say("mqtt: cannot use broker %s:%d: %s" % (self.host, self.port, e))
        self.c.loop_start()
        return self

    def stop(self):
        try:
            self.c.disconnect()
        except Exception:
            pass
        self.c.loop_stop()

    def _on_connect(self, client, userdata, flags, rc, props=None):
        if rc.is_failure:
            self._failed("refused: %s" % rc)
            return
        with self.lock:
            self.connected = True
            missed, self.unpublished = self.unpublished, 0
        client.subscribe("snakemesh/down/+/+", qos=1)
        if not self.ever:
            self.say("mqtt: connected to %s:%d" % (self.host, self.port))
        else:
            self.say("mqtt: reconnected to %s:%d; %d message(s) could not be published while it was away "
                     "(they are in the capture on disk)" % (self.host, self.port, missed))
        self.ever = True
        self._said_fail = False

    def _on_disconnect(self, client, userdata, flags, rc, props=None):
        with self.lock:
            was = self.connected
            self.connected = False
        if was:
            self.say("mqtt: lost the broker %s:%d (%s); reconnecting, capture continues"
                     % (self.host, self.port, rc))

    def _on_connect_fail(self, client, userdata):
        self._failed("unreachable")

    def _failed(self, why):
        self.failures += 1
        if not self._said_fail:
            self._said_fail = True
            self.say("mqtt: cannot reach broker %s:%d (%s); retrying, capture continues"
                     % (self.host, self.port, why))

    def publish(self, topic, payload):
        with self.lock:
            if not self.connected:
                self.unpublished += 1
                self.unpublished_total += 1
                return False
        info = self.c.publish(topic, payload, qos=1)
        if info.rc != self.mqtt.MQTT_ERR_SUCCESS:
            with self.lock:
                self.unpublished += 1
                self.unpublished_total += 1
            return False
        self.published += 1
        return True

    def _on_message(self, client, userdata, msg):
        self.down(msg.topic, msg.payload)


class Gateway(object):
    """A running gateway around a node's console tap: `on_line` takes the
    node's console lines (ConsoleTap), `request(cmd, timeout)` is the tap's."""

    def __init__(self, capture, request, say, mqtt=None, own_key=None):
        self.capture = capture
        self.own_key = own_key      # the gateway node's records go to the capture too
        self.request = request
        self.say = say
        self.asm = Assembler()
        self.bridge = None
        self.counts = {"datagrams": 0, "telemetry": 0, "uplink": 0, "bad_telemetry": 0,
                       "bad_downlink": 0, "downlink": 0, "downlink_delivered": 0,
                       "downlink_failed": 0}
        self.down_q = []
        self.down_ev = threading.Event()
        self.stop_ev = threading.Event()
        self.worker = None
        if mqtt is not None:
            self.bridge = Bridge(mqtt[0], mqtt[1], say, self._downlink)

    def start(self, interval=None):
        r = self.request("recv all", timeout=5.0)
        if r is None or not r.get("ok", True):
            raise RuntimeError("the node did not start passing datagrams: %r" % (r,))
        if interval:
            self.request("telemetry %g" % interval, timeout=5.0)
        self.worker = threading.Thread(target=self._down_loop, daemon=True)
        self.worker.start()
        if self.bridge is not None:
            self.bridge.start()
        return self

    def stop(self):
        self.stop_ev.set()
        self.down_ev.set()
        if self.bridge is not None:
            self.bridge.stop()
        self.capture.close()

    def bad(self, what, line):
        self.counts[what] += 1
        self.say("%s (%d so far)" % (line, self.counts[what]))

    # -- uplink -------------------------------------------------------------------
    def on_line(self, line):
        if not line.startswith(b"@sm {"):
            return
        try:
            rec = json.loads(line[4:].decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return
        if not isinstance(rec, dict):
            return
        if rec.get("kind") != "datagram":
            # the gateway node's own telemetry (it is a node of the mesh too)
            if "v" in rec and "id" not in rec and rec.get("node") == self.own_key:
                now = time.time()
                rec.setdefault("t", round(now, 3))
                rec["host_t"] = round(now, 3)
                rec["port"] = "gateway"
                self.capture.write(rec)
                if self.bridge is not None:
                    self.bridge.publish("snakemesh/telemetry/%s" % self.own_key,
                                        json.dumps(rec, separators=(",", ":")))
            return
        self.on_datagram(rec.get("src"), rec.get("service"), binascii.unhexlify(rec.get("data_hex") or ""))

    def on_datagram(self, src, service, data, now=None):
        now = time.time() if now is None else now
        self.counts["datagrams"] += 1
        if service != SERVICE:
            self.counts["uplink"] += 1
            if self.bridge is not None:
                self.bridge.publish("snakemesh/up/%s/%d" % (src, service), data)
            return
        if data[:1] == bytes([FORMAT]):
            try:
                recs = self.asm.add_datagram(src, data, now)
            except UnicodeDecodeError:
                self.bad("bad_telemetry", "telemetry from %s dropped: text that is not UTF-8" % src[:16])
                return
            except ValueError as e:
                self.bad("bad_telemetry", "telemetry from %s dropped: %s" % (src[:16], e))
                return
        else:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                self.bad("bad_telemetry", "telemetry from %s dropped: not UTF-8 text" % src[:16])
                return
            try:
                rec = self.asm.add(src, json.loads(text), now)
            except ValueError as e:
                self.bad("bad_telemetry", "telemetry from %s dropped: %s" % (src[:16], str(e).split(":")[0]))
                return
            recs = [rec] if rec is not None else []
        for rec in recs:
            self.counts["telemetry"] += 1
            self.capture.write(rec)
            if self.bridge is not None:
                self.bridge.publish("snakemesh/telemetry/%s" % src, json.dumps(rec, separators=(",", ":")))

    # -- downlink -----------------------------------------------------------------
    def _downlink(self, topic, payload):
        parts = topic.split("/")
        if len(parts) != 4 or parts[:2] != ["snakemesh", "down"]:
            self.bad("bad_downlink", "downlink %r ignored: expected snakemesh/down/KEY/SERVICE" % topic)
            return
        key, svc = parts[2].lower(), parts[3]
        if not _hex64(key):
            self.bad("bad_downlink", "downlink %r ignored: the key is not 64 hex digits" % topic)
            return
        try:
            service = int(svc)
        except ValueError:
            service = -1
        if not 0 <= service <= 65535 or not svc.isdigit():
            self.bad("bad_downlink", "downlink %r ignored: the service is not 0..65535" % topic)
            return
        self.down_q.append((key, service, bytes(payload)))
        self.down_ev.set()

    def _down_loop(self):
        while not self.stop_ev.is_set():
            self.down_ev.wait(0.5)
            self.down_ev.clear()
            while self.down_q and not self.stop_ev.is_set():
                key, service, data = self.down_q.pop(0)
                outcome = self.send(key, service, data)
                if self.bridge is not None:
                    self.bridge.publish("snakemesh/ack/%s/%d" % (key, service), outcome)

    def send(self, key, service, data):
        """One datagram with ack into the mesh: "delivered" or "failed: reason"."""
        self.counts["downlink"] += 1
        chunk = 256
        if len(data) <= chunk:
            arg = binascii.hexlify(data).decode() if data else ""
        else:
            off = 0
            while off < len(data):
                r = self.request("put %d %d %s" % (len(data), off, binascii.hexlify(data[off:off + chunk]).decode()),
                                 timeout=5.0)
                if r is None or r.get("ok") is False:
                    err = (r or {}).get("error") or "no answer from the node"
                    return self._failed(key, service, "too_big" if err.startswith("too_big") else err)
                off += chunk
            arg = "@"
        r = self.request(("send %s %d 1 %s" % (key, service, arg)).rstrip(), timeout=40.0)
        if r is None:
            return self._failed(key, service, "no answer from the node")
        if r.get("ok") is False:
            return self._failed(key, service, r.get("error") or "refused")
        if r.get("state") == "delivered":
            self.counts["downlink_delivered"] += 1
            return "delivered"
        return self._failed(key, service, r.get("reason") or r.get("state") or "unknown")

    def _failed(self, key, service, reason):
        self.counts["downlink_failed"] += 1
        self.say("downlink to %s service %d failed: %s" % (key[:16], service, reason))
        return "failed: %s" % reason

    def progress(self, now=None):
        now = time.time() if now is None else now
        with self.capture.lock:           # the tap's thread adds nodes meanwhile
            nodes = dict((k, dict(v)) for k, v in self.capture.nodes.items())
        line = "nodes %d, records %d" % (len(nodes), self.capture.records)
        if nodes:
            key, n = max(nodes.items(), key=lambda kv: kv[1]["last"] or 0)
            line += ", last %s %.0f s ago" % (key[:16], now - (n["last"] or now))
            oldest_key, o = min(nodes.items(), key=lambda kv: kv[1]["last"] or 0)
            line += ", quietest %s %.0f s ago" % (oldest_key[:16], now - (o["last"] or now))
        if self.bridge is not None:
            line += ", mqtt %s (%d published, %d not)" % (
                "up" if self.bridge.connected else "down", self.bridge.published, self.bridge.unpublished_total)
        return line
