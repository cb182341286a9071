"""Secrets: no console reply, telemetry record, log line, mesh output or
analysis report of a full run contains a node's private key (its 32-byte
ed25519 seed), raw, in hex or in base64; key files are owner-only."""
import base64
import binascii
import hashlib
import json
import os
import stat
import subprocess
import sys

from host_tools.procmesh.mesh import ProcessMesh
from host_tools.sim.keys import node_seed

TOPO = "a b c\nc d @ble\n"


def forms(seed):
    h = binascii.hexlify(seed)
    out = [seed, h, h.upper(), base64.b64encode(seed), base64.urlsafe_b64encode(seed),
           base64.b64encode(seed).rstrip(b"=")]
    # the expanded secret scalar (first half of SHA-512(seed)) must not leak either
    scalar = hashlib.sha512(seed).digest()[:32]
    out += [scalar, binascii.hexlify(scalar)]
    # a printable prefix long enough to be unique
    return out


def scan_tree(root, needles):
    hits = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            try:
                data = open(p, "rb").read()
            except OSError:
                continue
            for nd in needles:
                if nd in data:
                    hits.append((p, nd[:8]))
    return hits


def test_no_output_of_a_full_run_contains_a_private_key(tmp_path):
    topo = tmp_path / "t.txt"
    topo.write_text(TOPO)
    out = tmp_path / "run"
    seed_str = "42"
    seeds = {n: node_seed(seed_str, n) for n in "abcd"}
    console = []
    with ProcessMesh(str(topo), str(out), seed=42) as m:
        m.wait_converged(timeout=90)
        for n in m.names:
            for cmd in ("help", "version", "status", "peers", "tree", "snake", "routes", "stats",
                        "telemetry 1", "nonsense", "ping 00", "status extra"):
                console.append(json.dumps(m.request(n, cmd)))
        m.ping("a", "d")
        m.trace("a", "d")
        m.record(3)
        for n in m.names:
            console.extend(l.decode("utf-8", "replace") for l in m.nodes[n].lines)
            console.append(json.dumps(m.nodes[n].boot))
    (tmp_path / "console.txt").write_text("\n".join(console))
    # the analysis report of the same run
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    r = subprocess.run([sys.executable, "-m", "host_tools.cli", "analyze", str(out / "telemetry.jsonl"),
                        "--out", str(tmp_path / "analysis"), "--report", "-q"],
                       capture_output=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    (tmp_path / "analyze-output.txt").write_bytes(r.stdout + r.stderr)
    assert (tmp_path / "analysis" / "report" / "index.html").is_file()
    needles = [f for s in seeds.values() for f in forms(s)]
    hits = scan_tree(str(tmp_path), needles)
    assert hits == [], hits
    # the scan does find a key where one is written (the test can fail)
    (tmp_path / "canary.txt").write_bytes(b"x" + base64.b64encode(seeds["b"]) + b"x")
    canary = scan_tree(str(tmp_path), needles)
    assert canary and {p for p, _ in canary} == {str(tmp_path / "canary.txt")}


def test_keygen_file_is_owner_only_and_prints_only_the_public_key(tmp_path):
    key = tmp_path / "k.key"
    r = subprocess.run([sys.executable, "-m", "host_tools.cli", "keygen", "--out", str(key)],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    mode = stat.S_IMODE(os.stat(key).st_mode)
    assert mode == 0o600, oct(mode)
    seed = key.read_bytes()
    seed = binascii.unhexlify(seed.strip()) if len(seed) != 32 else seed
    text = r.stdout + r.stderr
    for f in forms(seed):
        assert f not in text
    from snake.crypto import public_key
    assert binascii.hexlify(public_key(seed)) in text
