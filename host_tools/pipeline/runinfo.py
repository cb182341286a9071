"""What the files beside the telemetry say about the run (inputs.SIDE_FILES):

* `nodes.json` (`snakemesh mesh`, the demo): {name: {"key": hex, "console": path}};
* `truth.json` (`snakemesh sim`): node names -> keys, the run's parameters and
  the simulator's own ground truth (convergence, probe delivery);
* `topology.txt` (both): the topology in the shared format, by name.

They are small and read on the driver. A side file that cannot be read is
noted and left out: it never stops an analysis of good telemetry.
"""
import json
import os
import re

_KEY = re.compile(r"^[0-9a-fA-F]{64}$")


class RunInfo(object):
    def __init__(self):
        self.names = {}          # key (lower hex) -> name
        self.topology = None     # path of a topology.txt (only if exactly one was found)
        self.truth = None        # summary of truth.json for summary.json
        self.notes = []          # one line per side file that was left out

    def _name(self, key, name, src):
        if isinstance(key, str) and _KEY.match(key) and isinstance(name, str) and name:
            self.names.setdefault(key.lower(), name)
            return True
        return False


def _load_json(path, info):
    try:
        with open(path, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        info.notes.append("%s: not used (%s)" % (path, e.__class__.__name__))
        return None


def load(side):
    """side: {"topology.txt": [paths], "truth.json": [...], "nodes.json": [...]}"""
    info = RunInfo()
    for p in side.get("nodes.json", ()):
        d = _load_json(p, info)
        if not isinstance(d, dict):
            if d is not None:
                info.notes.append("%s: not used (not a JSON object)" % p)
            continue
        for name, v in d.items():
            key = v.get("key") if isinstance(v, dict) else v
            info._name(key, name, p)
    truths = []
    for p in side.get("truth.json", ()):
        d = _load_json(p, info)
        if not isinstance(d, dict):
            continue
        nodes = d.get("nodes")
        if isinstance(nodes, dict):
            for name, key in nodes.items():
                info._name(key, name, p)
        truths.append((p, d))
    if len(truths) == 1:
        p, d = truths[0]
        s = d.get("summary") if isinstance(d.get("summary"), dict) else {}
        params = d.get("params") if isinstance(d.get("params"), dict) else {}
        prof = params.get("profile")
        info.truth = {
            "source": p,
            "nodes": s.get("nodes"),
            "edges": s.get("edges"),
            "duration_s": s.get("duration_s"),
            "first_convergence_s": s.get("first_convergence_s"),
            "converged_s": s.get("converged_s"),
            "snake_correct_ratio_final": s.get("snake_correct_ratio_final"),
            "links_refused": s.get("links_refused"),
            "converged_at_end": s.get("converged_at_end"),
            "probes": s.get("probes"),
            "probes_ok": s.get("probes_ok"),
            "delivery_ratio": s.get("delivery_ratio"),
            "seed": params.get("seed"),
            "topology": params.get("topology"),
            "profile": prof.get("name") if isinstance(prof, dict) else prof,
        }
    elif len(truths) > 1:
        info.notes.append("%d truth.json files: the simulator's ground truth is left out" % len(truths))
    tops = list(side.get("topology.txt", ()))
    if len(tops) == 1:
        info.topology = tops[0]
    elif len(tops) > 1:
        info.notes.append("%d topology.txt files: none is used" % len(tops))
    return info


def describe(path):
    return os.path.basename(os.path.dirname(path)) + "/" + os.path.basename(path)
