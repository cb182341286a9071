"""Scenario files: scripted events for a simulation run.

Text, one event per line: ``TIME ACTION ARGS...`` with TIME in virtual
seconds since the start. ``#`` starts a comment; blank lines are ignored.
Events run in time order (file order for equal times)::

    # time  action      arguments
    10      crash       c
    25      restart     c
    30      link-down   a b
    40      link-up     a b
    45      set-link    a b latency=30 loss=0.1 bw=20000
    50      partition   a b c | d e       # "| rest" may be left out: all other nodes
    70      heal
    80      join        z a b @ble        # new node z linked to a and b (default @wifi)
    5       ping-set    20 interval=1 count=10 timeout=5   # 20 random pairs
    5       ping-set    a:d b:e count=3                    # listed pairs
    5       dgram-set   10 count=20 interval=0.5 size=2000 ack=1   # datagrams

ping-set: N random pairs of alive nodes in the same reachable component
(chosen with the run's seeded generator when the event fires) or listed
``SRC:DST`` pairs; each pair is pinged `count` times (default 1), every
`interval` seconds (default 1), each with `timeout` seconds (default 5).

dgram-set: the same pairs, each sends `count` application datagrams
(snake/datagram.py, docs/reference/DATAGRAMS.md) of `size` bytes (default
64, at least 8) to `service` (default 1), every `interval` seconds, with an
end-to-end ack unless ack=0; outcomes (delivered / failed by reason /
sent) go to truth.json `datagrams` and the summary, and a
`datagram_send` telemetry record each.
"""
import math

from host_tools.sim.links import LINK_IDS, LINK_TYPES
from host_tools.sim.engine import US_PER_S


class ScenarioError(ValueError):
    """A scenario line is malformed (message has file and line)."""


class Event:
    __slots__ = ("t", "action", "args", "opts", "line", "source")

    def __init__(self, t, action, args, opts, line, source):
        self.t = t
        self.action = action
        self.args = args
        self.opts = opts
        self.line = line
        self.source = source

    def describe(self):
        parts = [self.action] + list(self.args)
        parts += ["%s=%s" % (k, v) for k, v in sorted(self.opts.items())]
        return " ".join(parts)

    def __repr__(self):
        return "Event(%s %s)" % (_fmt(self.t), self.describe())


def _fmt(x):
    return ("%.3f" % x).rstrip("0").rstrip(".")


# action -> (min args, max args or None, allowed options)
ACTIONS = {
    "crash": (1, 1, ()),
    "restart": (1, 1, ()),
    "link-down": (2, 2, ()),
    "link-up": (2, 2, ()),
    "set-link": (2, 2, ("latency", "bw", "loss")),
    "partition": (1, None, ()),
    "heal": (0, 0, ()),
    "join": (1, None, ()),
    "ping-set": (1, None, ("interval", "count", "timeout")),
    "dgram-set": (1, None, ("interval", "count", "size", "ack", "service")),
}


def parse(text, names=None, source="<scenario>"):
    """Parse scenario text into a time-sorted list of Events. When `names`
    (the topology's node names) is given, node names are checked, taking
    `join` events into account."""
    events = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = "%s:%d" % (source, lineno)
        toks = line.split()
        try:
            t = float(toks[0])
        except ValueError:
            raise ScenarioError("%s: time %r is not a number" % (where, toks[0]))
        if not math.isfinite(t) or t < 0:
            raise ScenarioError("%s: time must be >= 0" % where)
        if len(toks) < 2:
            raise ScenarioError("%s: missing action" % where)
        action = toks[1]
        if action not in ACTIONS:
            raise ScenarioError("%s: unknown action %r (one of %s)"
                                % (where, action, ", ".join(sorted(ACTIONS))))
        lo, hi, allowed = ACTIONS[action]
        args = []
        opts = {}
        for tok in toks[2:]:
            if "=" in tok and action != "partition":
                k, _, v = tok.partition("=")
                if k not in allowed:
                    raise ScenarioError("%s: %s takes no option %r%s" % (
                        where, action, k, (" (options: %s)" % ", ".join(allowed)) if allowed else ""))
                try:
                    x = float(v)
                except ValueError:
                    raise ScenarioError("%s: option %s=%r is not a number" % (where, k, v))
                if not math.isfinite(x) or x < 0:
                    raise ScenarioError("%s: option %s must be >= 0" % (where, k))
                opts[k] = x
            else:
                args.append(tok)
        _check(action, args, opts, lo, hi, where)
        events.append(Event(t, action, args, opts, lineno, source))
    events.sort(key=lambda e: e.t)   # stable: file order for equal times
    if names is not None:
        check_names(events, names)
    return events


def _check(action, args, opts, lo, hi, where):
    nargs = len(args)
    if action == "join" and args and args[-1].startswith("@"):
        if args[-1][1:] not in LINK_IDS:
            raise ScenarioError("%s: unknown link type %s (one of %s)"
                                % (where, args[-1], ", ".join(LINK_TYPES)))
        nargs -= 1
    if nargs < lo or (hi is not None and nargs > hi):
        want = str(lo) if lo == hi else ("%d..%s" % (lo, hi if hi is not None else ""))
        raise ScenarioError("%s: %s takes %s argument(s), got %d" % (where, action, want, nargs))
    if action == "partition":
        if args.count("|") > 1:
            raise ScenarioError("%s: partition takes one '|'" % where)
        if args[0] == "|":
            raise ScenarioError("%s: partition needs nodes before '|'" % where)
    if action == "dgram-set":
        if opts.get("size", 64) < 8 or opts.get("size", 64) > 65535:
            raise ScenarioError("%s: dgram-set size must be within 8..65535" % where)
        if not 0 <= opts.get("service", 1) <= 65535:
            raise ScenarioError("%s: dgram-set service must be within 0..65535" % where)
    if action == "ping-set" or action == "dgram-set":
        if len(args) == 1 and ":" not in args[0]:
            try:
                n = int(args[0])
            except ValueError:
                raise ScenarioError("%s: %s takes N or SRC:DST pairs" % (where, action))
            if n < 1:
                raise ScenarioError("%s: %s N must be >= 1" % (where, action))
        else:
            for a in args:
                src, sep, dst = a.partition(":")
                if not sep or not src or not dst:
                    raise ScenarioError("%s: %s pair %r is not SRC:DST" % (where, action, a))
        if "count" in opts and (opts["count"] != int(opts["count"]) or opts["count"] < 1):
            raise ScenarioError("%s: %s count must be a positive integer" % (where, action))
        if opts.get("interval", 1) <= 0 or opts.get("timeout", 1) <= 0:
            raise ScenarioError("%s: %s interval and timeout must be > 0" % (where, action))
    if action == "set-link" and opts.get("loss", 0) > 1:
        raise ScenarioError("%s: loss must be within 0..1" % where)


def event_nodes(ev):
    """Node names an event refers to (excluding a join's new node)."""
    a = ev.action
    if a == "partition":
        return [x for x in ev.args if x != "|"]
    if a == "join":
        return [x for x in ev.args[1:] if not x.startswith("@")]
    if a == "ping-set" or a == "dgram-set":
        if len(ev.args) == 1 and ":" not in ev.args[0]:
            return []
        out = []
        for p in ev.args:
            s, _, d = p.partition(":")
            out += [s, d]
        return out
    return list(ev.args)


def check_names(events, names):
    known = set(names)
    for ev in events:
        where = "%s:%d" % (ev.source, ev.line)
        for n in event_nodes(ev):
            if n not in known:
                raise ScenarioError("%s: unknown node %r" % (where, n))
        if ev.action == "join":
            if ev.args[0] in known:
                raise ScenarioError("%s: join: node %r exists already" % (where, ev.args[0]))
            known.add(ev.args[0])
        if ev.action in ("link-down", "link-up", "set-link") and ev.args[0] == ev.args[1]:
            raise ScenarioError("%s: %s needs two different nodes" % (where, ev.action))


def load(path, names=None):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ScenarioError("cannot read scenario %s: %s" % (path, e.strerror or e))
    except UnicodeDecodeError:
        raise ScenarioError("scenario %s is not UTF-8 text" % path)
    return parse(text, names, path)


# -- applying ------------------------------------------------------------------

def schedule(mesh, events):
    """Put every event on the mesh's clock (times relative to the run start)."""
    for ev in events:
        mesh.engine.at(int(round(ev.t * US_PER_S)), _fire, mesh, ev)


def _fire(mesh, ev):
    try:
        apply(mesh, ev)
    except ValueError as e:     # e.g. link-down of a pair that is not linked
        mesh._sim_event("scenario_error", "%s:%d: %s" % (ev.source, ev.line, e), None)


def apply(mesh, ev):
    """Apply one event to a Mesh now."""
    a = ev.action
    args = ev.args
    if a == "crash":
        mesh.kill(args[0])
    elif a == "restart":
        mesh.restart(args[0])
    elif a == "link-down":
        mesh.link_down(args[0], args[1])
    elif a == "link-up":
        mesh.link_up(args[0], args[1])
    elif a == "set-link":
        o = ev.opts
        mesh.set_link(args[0], args[1], latency_ms=o.get("latency"), bw=o.get("bw"),
                      loss=o.get("loss"))
    elif a == "partition":
        if "|" in args:
            i = args.index("|")
            ga, gb = args[:i], args[i + 1:]
            mesh.partition(ga, gb or None)
        else:
            mesh.partition(args)
    elif a == "heal":
        mesh.heal()
    elif a == "join":
        link = "wifi"
        nb = args[1:]
        if nb and nb[-1].startswith("@"):
            link = nb[-1][1:]
            nb = nb[:-1]
        mesh.join(args[0], nb, link)
    elif a == "ping-set":
        _ping_set(mesh, ev)
    elif a == "dgram-set":
        _dgram_set(mesh, ev)
    else:  # pragma: no cover - parse() rejects unknown actions
        raise ScenarioError("unknown action %r" % a)


def _ping_set(mesh, ev):
    o = ev.opts
    count = int(o.get("count", 1))
    interval_us = int(round(o.get("interval", 1.0) * US_PER_S))
    timeout = o.get("timeout", 5.0)
    if len(ev.args) == 1 and ":" not in ev.args[0]:
        pairs = mesh.pick_pairs(int(ev.args[0]))
    else:
        pairs = [tuple(p.split(":", 1)) for p in ev.args]
    mesh._sim_event("ping_set", "%d pairs x %d" % (len(pairs), count), None)
    eng = mesh.engine
    for k in range(count):
        for i, (s, d) in enumerate(pairs):
            # spread each round's pings 1 ms apart
            eng.at(eng.now + k * interval_us + i * 1000, _ping, mesh, (s, d, timeout))


def _dgram_set(mesh, ev):
    o = ev.opts
    count = int(o.get("count", 1))
    interval_us = int(round(o.get("interval", 1.0) * US_PER_S))
    if len(ev.args) == 1 and ":" not in ev.args[0]:
        pairs = mesh.pick_pairs(int(ev.args[0]))
    else:
        pairs = [tuple(p.split(":", 1)) for p in ev.args]
    mesh._sim_event("dgram_set", "%d pairs x %d" % (len(pairs), count), None)
    eng = mesh.engine
    spec = (int(o.get("size", 64)), int(o.get("service", 1)), bool(o.get("ack", 1)))
    for k in range(count):
        for i, (s, d) in enumerate(pairs):
            eng.at(eng.now + k * interval_us + i * 1000, _dgram, mesh, (s, d) + spec)


def _dgram(mesh, arg):
    s, d, size, service, ack = arg
    mesh.send_datagram(s, d, size, service, ack)


def _ping(mesh, arg):
    s, d, timeout = arg
    mesh.start_ping(s, d, timeout)
