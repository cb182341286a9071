"""Board profiles per node, for heterogeneous meshes (``snakemesh sim`` and
``snakemesh mesh``: --profile, --hub-profile, --node-profile).

A profile is named by a board (``boards/NAME/profile.json``) or given as a
path to a profile.json. Every node runs the base profile, except:
- with a hub profile, every node whose degree (links in the topology)
  exceeds the base profile's ``max_peers`` runs the hub profile (a node that
  could not take all its links is a hub: give it a gateway);
- ``--node-profile NAME=PROFILE`` sets single nodes (it wins over the hub
  rule).
"""
import os


class ProfileSpecError(ValueError):
    """Unusable profile option (the message is one line for the user)."""


def _boards():
    from host_tools import BOARDS_DIR
    try:
        return sorted(d for d in os.listdir(BOARDS_DIR)
                      if os.path.isfile(os.path.join(BOARDS_DIR, d, "profile.json")))
    except OSError:
        return []


def profile_path(spec):
    """Path of a profile named by a board or a path; ProfileSpecError when
    neither exists."""
    from host_tools import BOARDS_DIR
    if not isinstance(spec, str) or not spec:
        raise ProfileSpecError("bad profile %r" % (spec,))
    cand = os.path.join(BOARDS_DIR, spec, "profile.json")
    if os.sep not in spec and "/" not in spec and os.path.isfile(cand):
        return cand
    if os.path.isfile(spec):
        return spec
    if os.path.isdir(spec) and os.path.isfile(os.path.join(spec, "profile.json")):
        return os.path.join(spec, "profile.json")
    if "/" in spec or os.sep in spec or spec.endswith(".json"):
        raise ProfileSpecError("no such profile file: %s" % spec)
    raise ProfileSpecError("no board profile %r (boards: %s; or a path to a profile.json)"
                           % (spec, ", ".join(_boards())))


def load(spec):
    """A snake.profile.Profile from a board name, a path, a dict or a
    Profile (None = UNIX)."""
    from snake.profile import Profile, ProfileError
    if spec is None:
        spec = "UNIX"
    if isinstance(spec, Profile):
        return spec
    try:
        if isinstance(spec, dict):
            return Profile(spec)
        path = profile_path(spec)
        return Profile.load(path)
    except ProfileError as e:
        msg = str(e)
        if isinstance(spec, str) and spec not in msg:
            msg = "profile %s: %s" % (spec, msg)
        raise ProfileSpecError(msg)


def parse_profile_set(items, option="--profile-set"):
    """{key: value} from ["KEY=VALUE", ...] (the CLI's repeatable
    --profile-set of `sim` and `plan`): VALUE is JSON, else a plain string.
    ProfileSpecError on a malformed item."""
    import json
    out = {}
    for item in items or ():
        k, sep, v = item.partition("=")
        k = k.strip()
        if not sep or not k:
            raise ProfileSpecError("%s takes KEY=VALUE, got %r" % (option, item))
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def with_settings(prof, overrides):
    """The profile (a spec or Profile) with {key: value} overrides applied
    (checked as a profile: ProfileSpecError with one line); the profile
    itself when there are none."""
    from snake.profile import Profile, ProfileError
    prof = load(prof)
    if not overrides:
        return prof
    d = prof.as_dict()
    d.update(overrides)
    try:
        return Profile(d)
    except ProfileError as e:
        raise ProfileSpecError("profile %s with %s: %s" % (
            prof.name, ", ".join("%s=%s" % kv for kv in sorted(overrides.items())), e))


def describe_settings(overrides):
    """'max_routes=300, route_hints=0' (sorted), '' for none."""
    import json
    return ", ".join("%s=%s" % (k, json.dumps(v) if not isinstance(v, str) else v)
                     for k, v in sorted((overrides or {}).items()))


def parse_node_profiles(items):
    """{"name": "PROFILE"} from ["NAME=PROFILE", ...] (the CLI's repeatable
    --node-profile); ProfileSpecError on a malformed item or a node named
    twice."""
    out = {}
    for item in items or ():
        name, sep, prof = item.partition("=")
        name, prof = name.strip(), prof.strip()
        if not sep or not name or not prof:
            raise ProfileSpecError("--node-profile takes NAME=PROFILE, got %r" % item)
        if name in out and out[name] != prof:
            raise ProfileSpecError("--node-profile: node %s given twice (%s, %s)"
                                   % (name, out[name], prof))
        out[name] = prof
    return out


def assign(names, degree, base, hub=None, node_profiles=None, later=()):
    """{name: profile spec} for the nodes that do not run `base` (a Profile
    or spec): the hub profile where degree(name) > base max_peers, then the
    single-node settings. `names` are the topology's nodes, `degree` maps a
    name to its number of links, `later` names nodes that join during the
    run (a scenario's `join`). Unknown node names are a ProfileSpecError."""
    base_p = load(base)
    node_profiles = dict(node_profiles or {})
    known = set(names) | set(later)
    for name in sorted(node_profiles):
        if name not in known:
            raise ProfileSpecError("--node-profile: no node named %r in the topology" % name)
    for spec in [hub] + [node_profiles[k] for k in sorted(node_profiles)]:
        if spec is not None:
            load(spec)                  # a bad option is an error even where unused
    out = {}
    if hub is not None:
        for name in names:
            if degree(name) > base_p.max_peers:
                out[name] = hub
    out.update(node_profiles)
    return out


def profile_name(p):
    """The name a profile reports (its "name" key)."""
    return getattr(p, "name", None) or "?"


ROOT_MARK = "root"


def parse_profile_map(text, source="<profile map>"):
    """({name: profile spec}, root name or None) from a profile map: one
    ``NAME PROFILE`` line per node that does not run the base profile,
    ``NAME PROFILE root`` for the node the keys make the tree's root
    (`snakemesh plan` writes it; at most one), ``#`` comments and blank
    lines ignored. ProfileSpecError names the file and line."""
    out = {}
    root = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        where = "%s:%d" % (source, lineno)
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != ROOT_MARK):
            raise ProfileSpecError("%s: expected 'NAME PROFILE' or 'NAME PROFILE root', got %r"
                                   % (where, line))
        name, prof = parts[0], parts[1]
        if name in out and out[name] != prof:
            raise ProfileSpecError("%s: node %s given twice (%s, %s)" % (where, name, out[name], prof))
        out[name] = prof
        if len(parts) == 3:
            if root is not None and root != name:
                raise ProfileSpecError("%s: a second root (%s; %s is one already)" % (where, name, root))
            root = name
    return out, root


def load_profile_map(path):
    """parse_profile_map of a file; ProfileSpecError (one line) when it
    cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileSpecError("cannot read profile map %s: %s"
                               % (path, getattr(e, "strerror", None) or e))
    return parse_profile_map(text, os.path.basename(path))


def format_profile_map(assignment, root=None, header=()):
    """Text of a profile map: {name: profile name}, sorted by name; the
    root (if any) marked."""
    lines = ["# %s" % h for h in header]
    for name in sorted(assignment):
        lines.append("%s %s%s" % (name, assignment[name], " " + ROOT_MARK if name == root else ""))
    return "\n".join(lines) + "\n"
