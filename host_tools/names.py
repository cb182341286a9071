"""Node names and keys on the command line.

Every command that takes a node's public key (ping, trace, the console's
ping/trace) accepts:

- the full key, 64 hex digits;
- a unique prefix of at least MIN_PREFIX (8) hex digits, as the tables
  print them (16 digits); it is looked up among the keys the node itself
  knows (its own, its peers', its routes', its tree ancestors') and the
  names file's;
- a node name from a names file (--names FILE or $SNAKEMESH_NAMES).

A names file is any of what the project writes or a plain list:
- `nodes.json` of `snakemesh mesh` / `demo` ({name: {"key": hex, ...}});
- `truth.json` of `snakemesh sim` ({"nodes": {name: hex}});
- a telemetry file (.jsonl) with a `topology` record ({"names": {hex: name}});
- a folder holding one of those (also in its mesh/ subfolder: a demo folder);
- a text file of `NAME KEY` lines (`#` comments).

An unknown, ambiguous or too short prefix, or an unknown name, is one
InputError line that lists the candidates.
"""
import json
import os

from host_tools.errors import InputError

MIN_PREFIX = 8
KEY_HEX = 64
ENV = "SNAKEMESH_NAMES"
_HEX = set("0123456789abcdefABCDEF")


def is_hex(s):
    return bool(s) and all(c in _HEX for c in s)


def _is_key(s):
    return isinstance(s, str) and len(s) == KEY_HEX and is_hex(s)


class Names(object):
    """name <-> key (hex, lower case), with where they came from."""

    def __init__(self, pairs=(), source=None):
        self.by_name = {}
        self.by_key = {}
        self.source = source
        for name, key in pairs:
            self.add(name, key)

    def add(self, name, key):
        key = key.lower()
        self.by_name[str(name)] = key
        self.by_key.setdefault(key, str(name))

    def __len__(self):
        return len(self.by_name)

    def name(self, key):
        return self.by_key.get((key or "").lower()) if key else None

    def label(self, key, width=16):
        """`name` if known, else the key's first `width` hex digits."""
        if key is None:
            return "-"
        n = self.name(key)
        return n if n else (key if width is None else key[:width])


EMPTY = Names()


# ---------------------------------------------------------------- loading --

def _from_json_obj(obj):
    pairs = []
    if isinstance(obj, dict):
        if isinstance(obj.get("nodes"), dict):                       # truth.json
            obj = obj["nodes"]
        for name, v in obj.items():
            key = v.get("key") if isinstance(v, dict) else v          # nodes.json / plain map
            if _is_key(key):
                pairs.append((name, key))
            elif _is_key(name) and isinstance(v, str):               # {hex: name}
                pairs.append((v, name))
    return pairs


def _from_jsonl(path):
    pairs = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if '"topology"' not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("kind") == "topology" and isinstance(rec.get("names"), dict):
                pairs += [(n, k) for k, n in rec["names"].items() if _is_key(k) and isinstance(n, str)]
    return pairs


def _from_text(path):
    pairs = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].split()
            if not line:
                continue
            if len(line) != 2 or not (_is_key(line[0]) or _is_key(line[1])):
                raise InputError("%s:%d: expected NAME KEY (a name and 64 hex digits)" % (path, lineno))
            a, b = line
            pairs.append((b, a) if _is_key(a) else (a, b))
    return pairs


FOLDER_FILES = ("nodes.json", "truth.json", "telemetry.jsonl",
                os.path.join("mesh", "nodes.json"), os.path.join("mesh", "telemetry.jsonl"))


def load(path):
    """Names from a file or folder (see the module doc); InputError if it
    cannot be read or holds no names."""
    if os.path.isdir(path):
        for f in FOLDER_FILES:
            p = os.path.join(path, f)
            if os.path.isfile(p):
                names = load(p)
                if len(names):
                    return names
        raise InputError("no node names in folder %s (looked for %s)" % (path, ", ".join(FOLDER_FILES)))
    try:
        if path.endswith(".jsonl"):
            pairs = _from_jsonl(path)
        elif path.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                try:
                    obj = json.load(f)
                except ValueError as e:
                    raise InputError("names file %s is not valid JSON: %s" % (path, e))
            pairs = _from_json_obj(obj)
        else:
            pairs = _from_text(path)
    except OSError as e:
        raise InputError("cannot read names file %s: %s" % (path, e.strerror or e))
    except UnicodeDecodeError:
        raise InputError("names file %s is not UTF-8 text" % path)
    if not pairs:
        raise InputError("no node names in %s (expected nodes.json, truth.json, telemetry with a "
                         "topology record, or NAME KEY lines)" % path)
    return Names(pairs, source=path)


def from_args(path=None):
    """--names PATH, else $SNAKEMESH_NAMES, else no names."""
    path = path or os.environ.get(ENV) or None
    if not path:
        return EMPTY
    return load(path)


# -------------------------------------------------------------- resolving --

def node_keys(client):
    """Every key a node knows, {hex: what it is}, from its console: itself,
    its peers and their roots, its tree (root, parent, ancestors), its
    descending neighbour and its routes."""
    keys = {}

    def add(k, what):
        if _is_key(k):
            keys.setdefault(k.lower(), what)
    st = client.request("status")
    add(st.get("key"), "this node")
    for p in client.request("peers").get("peers") or []:
        add(p.get("key"), "peer on port %s" % p.get("port"))
    tree = client.request("tree")
    add(tree.get("root"), "root")
    add(tree.get("parent"), "parent")
    for a in tree.get("ancestors") or []:
        add(a, "ancestor")
    add(st.get("desc"), "descending neighbour")
    for r in client.request("routes").get("routes") or []:
        add(r.get("key"), "route")
    return keys


def no_answer(key, known):
    """Why no probe to `key` came back, as far as the node can tell:
    `known` is node_keys() of the node that sent them (None: not asked).
    A key the node knows (a peer, route, tree node) is unreachable now; a
    key it has never heard of may belong to no node at all."""
    what = (known or {}).get(key.lower()) if known is not None else None
    if what == "this node":
        return "no answer from this node's own key"
    if what:
        return ("no answer: the node knows %s (%s) but it is unreachable now (gone, or its replies are lost)"
                % (key[:16], what))
    if known is not None:
        return ("no node answered for %s: the node has never heard of this key (no peer, route or tree node "
                "has it), so it may belong to no node in this mesh; check the key" % key[:16])
    return "no node answered for %s" % key[:16]


def _listing(keys, names, limit=6):
    items = sorted(keys)
    shown = []
    for k in items[:limit]:
        n = names.name(k)
        shown.append("%s (%s)" % (k[:16], n) if n else k[:16])
    more = len(items) - limit
    return ", ".join(shown) + (" and %d more" % more if more > 0 else "")


def _shown(t):
    return repr(t if len(t) <= 80 else t[:77] + "...")


def classify(text, names=EMPTY):
    """("key", hex) for a full key or a known name, ("prefix", hex) for a
    prefix to look up; InputError (before anything is sent) otherwise."""
    t = text.strip()
    if _is_key(t):
        return "key", t.lower()
    if t in names.by_name:
        return "key", names.by_name[t]
    if not is_hex(t):
        if len(names):
            raise InputError("unknown node name %s (names from %s: %s)"
                             % (_shown(t), names.source, _names_listing(names)))
        raise InputError("unknown key format: %s (expected a public key of 64 hex digits, a prefix of at "
                         "least %d, or a node name with --names FILE)" % (_shown(t), MIN_PREFIX))
    if len(t) > KEY_HEX:
        raise InputError("unknown key format: %s (%d hex digits: a public key has 64)" % (_shown(t), len(t)))
    if len(t) < MIN_PREFIX:
        raise InputError("key prefix %s is too short: give at least %d hex digits (or all 64)"
                         % (_shown(t), MIN_PREFIX))
    return "prefix", t.lower()


def resolve(text, names=EMPTY, known=None):
    """The full hex key `text` stands for. `known` is a function returning
    {hex: description} of the keys a node knows (called for a prefix), or
    None."""
    kind, t = classify(text, names)
    if kind == "key":
        return t
    cands = set(k for k in names.by_key if k.startswith(t))
    if known is not None:      # also when the names settle it: the node may know another match
        cands |= set(k for k in known() if k.startswith(t))
    if len(cands) == 1:
        return cands.pop()
    if not cands:
        raise InputError("no known key starts with %s (the node knows its peers, routes and tree only; "
                         "give all 64 hex digits%s)" % (t, "" if len(names) else " or --names FILE"))
    raise InputError("key prefix %s is ambiguous: %s; give more digits" % (t, _listing(cands, names)))


def _names_listing(names, limit=12):
    ns = sorted(names.by_name)
    more = len(ns) - limit
    return ", ".join(ns[:limit]) + (" and %d more" % more if more > 0 else "")


