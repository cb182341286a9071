"""Provisioning policy "a gateway is the root" (host_tools/keystore.py,
docs/reports/CAPACITY.md): a root-candidate profile's (GATEWAY's) key sorts above
every board key made by the tools, in `snakemesh keygen`, `provision`, the
simulator and `snakemesh mesh`; the CLI says clearly when a key does not
follow it."""
import binascii
import hashlib
import os
import sys
import types

import pytest
from nacl.signing import SigningKey

import host_tools  # noqa: F401
from host_tools import keystore
from host_tools.cli import main
from host_tools.commands import keys
from host_tools.commands.node import key_policy_warning
from host_tools.sim import keys as simkeys
from host_tools.sim import topology as T
from host_tools.sim.harness import Mesh, MeshError

HERE = os.path.dirname(os.path.abspath(__file__))
PORT = "socket://127.0.0.1:9"     # the fake mpremote does not open it


def nacl_pub(seed):
    return bytes(SigningKey(seed).verify_key)


def counter_seeds(tag):
    """A deterministic stand-in for os.urandom(32): sha256(tag:i)."""
    i = [0]

    def nxt():
        i[0] += 1
        return hashlib.sha256(("%s:%d" % (tag, i[0])).encode()).digest()
    return nxt


@pytest.fixture(scope="module")
def root_seed():
    """One real gateway key (two-byte prefix: ~65,536 draws)."""
    seed, pub, _ = keystore.draw_seed(True)
    return seed


# -------------------------------------------------------------- the draw --

def test_root_keys_sort_above_every_board_key():
    """The property the policy is for, with a one-byte prefix (fast): every
    root draw starts with it, no board draw does, so max(board) < min(root)."""
    prefix = b"\xff"
    nxt = counter_seeds("order")
    roots = [keystore.draw_seed(True, nxt, prefix) for _ in range(3)]
    boards = [keystore.draw_seed(False, nxt, prefix) for _ in range(600)]
    for seed, pub, draws in roots + boards:
        assert pub == nacl_pub(seed)
    assert all(p[:1] == prefix for _, p, _ in roots)
    assert not any(p[:1] == prefix for _, p, _ in boards)
    assert max(p for _, p, _ in boards) < min(p for _, p, _ in roots)
    assert sum(d for _, _, d in roots) > 3          # a root key is rarely the first draw


def test_board_draw_redraws_a_root_prefixed_key():
    """A board key that happens to carry the prefix is drawn again."""
    prefix = b"\xff"
    nxt = counter_seeds("redraw")
    seeds = []
    while not seeds or nacl_pub(seeds[-1])[:1] != prefix:
        seeds.append(nxt())
    normal = seeds[0] if nacl_pub(seeds[0])[:1] != prefix else None
    assert normal is not None
    seq = [seeds[-1], normal]
    seed, pub, draws = keystore.draw_seed(False, lambda: seq.pop(0), prefix)
    assert (seed, draws) == (normal, 2) and pub[:1] != prefix


def test_the_real_prefix_is_two_bytes(root_seed):
    assert keystore.ROOT_PREFIX == b"\xff\xff"
    pub = nacl_pub(root_seed)
    assert keystore.is_root_key(pub) and pub[:2] == b"\xff\xff"
    assert keystore.is_root_candidate("GATEWAY")
    for name in ("UNIX", "ESP32_GENERIC", "ESP32_GENERIC_C3", None):
        assert not keystore.is_root_candidate(name)


# ------------------------------------------------------------------ keygen --

def test_keygen_profile_gateway_makes_a_root_key(tmp_path, capfd):
    path = tmp_path / "gw.key"
    assert main(["keygen", "--out", str(path), "--profile", "GATEWAY"]) == 0
    out, err = capfd.readouterr()
    seed = path.read_bytes()
    assert out == binascii.hexlify(nacl_pub(seed)).decode() + "\n"
    assert out.startswith("ffff")
    assert err.startswith("snakemesh: root key for a GATEWAY node: ") and " draws in " in err
    assert binascii.hexlify(seed).decode() not in out + err


def test_keygen_board_profile_makes_a_board_key(tmp_path, capfd):
    assert main(["keygen", "--out", str(tmp_path / "b.key"), "--profile", "ESP32_GENERIC"]) == 0
    out, err = capfd.readouterr()
    assert err == "" and len(out.strip()) == 64
    assert out.strip() == binascii.hexlify(nacl_pub((tmp_path / "b.key").read_bytes())).decode()


def test_keygen_unknown_profile_is_one_clear_line(tmp_path, capfd):
    rc = main(["keygen", "--out", str(tmp_path / "x.key"), "--profile", "NOPE"])
    out, err = capfd.readouterr()
    assert rc == 5 and out == ""
    assert err.startswith("snakemesh: error: --profile: no board profile 'NOPE' (boards: ")
    assert "GATEWAY" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.key").exists()


def test_keygen_gateway_refuses_an_existing_file_before_drawing(tmp_path, capfd):
    path = tmp_path / "gw.key"
    path.write_bytes(b"k" * 32)
    rc = main(["keygen", "--out", str(path), "--profile", "GATEWAY"])
    out, err = capfd.readouterr()
    assert rc == 5 and out == ""
    assert err.strip() == ("snakemesh: error: %s already exists; use --force to replace it (the old "
                           "key is lost)" % path)
    assert path.read_bytes() == b"k" * 32


# --------------------------------------------------------------- provision --

@pytest.fixture
def board(tmp_path, monkeypatch):
    root = tmp_path / "board"
    root.mkdir()
    (root / "snake").mkdir()          # the firmware is deployed
    monkeypatch.setenv("SNAKEMESH_MPREMOTE", "%s %s" % (sys.executable,
                                                        os.path.join(HERE, "fakes", "fake_mpremote.py")))
    monkeypatch.setenv("FAKE_MPREMOTE_ROOT", str(root))
    monkeypatch.setenv("FAKE_MPREMOTE_LOG", str(tmp_path / "mpremote.log"))
    monkeypatch.setenv("FAKE_MPREMOTE_MODE", "ok")
    return root


def test_provision_refuses_a_gateway_key_on_a_board(tmp_path, board, root_seed, capfd):
    kf = tmp_path / "gw.key"
    kf.write_bytes(root_seed)
    os.chmod(str(kf), 0o600)
    rc = main(["provision", "--port", PORT, "--key-file", str(kf)])
    out, err = capfd.readouterr()
    assert rc == 5 and out == ""
    assert err.strip() == ("snakemesh: error: %s holds a gateway's key (public key ffff%s...: it sorts "
                           "above every board's, so this board would become the tree's root); give the "
                           "board a key from `snakemesh keygen --out FILE`, or --allow-root-key"
                           % (kf, binascii.hexlify(nacl_pub(root_seed)[2:4]).decode()))
    assert not (board / "key.bin").exists()
    assert main(["provision", "--port", PORT, "--key-file", str(kf), "--allow-root-key"]) == 0
    assert (board / "key.bin").read_bytes() == root_seed


def test_on_board_generation_redraws_a_root_prefixed_key(tmp_path, root_seed, monkeypatch):
    """The script `provision` runs on a board draws again when os.urandom
    gives a key that starts with ffff."""
    normal = os.urandom(32)
    while keystore.is_root_key(nacl_pub(normal)):
        normal = os.urandom(32)
    seq = [root_seed, normal]
    fake = types.ModuleType("os")
    for name in ("stat", "remove", "rename"):
        setattr(fake, name, getattr(os, name))
    fake.urandom = lambda n: seq.pop(0)
    monkeypatch.setitem(sys.modules, "os", fake)
    exec(keys.script_generate(False, str(tmp_path)), {})
    monkeypatch.undo()
    assert (tmp_path / "key.bin").read_bytes() == normal and seq == []


# --------------------------------------------------------------------- node --

def test_node_warns_when_a_board_profile_runs_a_gateway_key(root_seed):
    board_pub = binascii.hexlify(nacl_pub(b"\x01" * 32)).decode()
    assert not board_pub.startswith("ffff")
    root_pub = binascii.hexlify(nacl_pub(root_seed)).decode()
    assert key_policy_warning("UNIX", root_pub) == (
        "this node's key starts with ffff (made for a gateway) but it runs UNIX: it may become the "
        "tree's root")
    assert key_policy_warning("GATEWAY", root_pub) is None
    assert key_policy_warning("GATEWAY", board_pub) is None   # the policy is optional
    assert key_policy_warning("UNIX", board_pub) is None
    assert key_policy_warning("NOPE", root_pub) is None       # the node reports a bad profile


# --------------------------------------------------------------- simulator --

def test_sim_gives_hub_gateways_the_highest_keys():
    topo = T.generate("ba:80:2", seed=3)
    m = Mesh(topo, seed=5, profile="ESP32_GENERIC", hub_profile="GATEWAY", gateway_root=True)
    gw = [n for n in m.nodes if m.router(n).profile.name == "GATEWAY"]
    boards = [n for n in m.nodes if n not in gw]
    assert gw and boards
    assert all(m.key(n)[:1] == simkeys.SIM_ROOT_PREFIX for n in gw)
    assert not any(m.key(n)[:1] == simkeys.SIM_ROOT_PREFIX for n in boards)
    assert max(m.key(n) for n in boards) < min(m.key(n) for n in gw)
    assert m.expected_root(m.nodes[0]) in gw
    # deterministic per seed, and different for another seed
    again = Mesh(topo, seed=5, profile="ESP32_GENERIC", hub_profile="GATEWAY", gateway_root=True)
    assert [again.key(n) for n in again.nodes] == [m.key(n) for n in m.nodes]
    other = Mesh(topo, seed=6, profile="ESP32_GENERIC", hub_profile="GATEWAY", gateway_root=True)
    assert [other.key(n) for n in gw] != [m.key(n) for n in gw]


def test_sim_without_the_policy_keeps_the_plain_keys():
    topo = T.generate("ba:80:2", seed=3)
    m = Mesh(topo, seed=5, profile="ESP32_GENERIC", hub_profile="GATEWAY")
    assert not m.root_policy
    for n in m.nodes:
        assert m.key(n) == nacl_pub(simkeys.node_seed(5, n))


def test_sim_gateway_root_needs_a_gateway(tmp_path, capfd):
    with pytest.raises(MeshError) as e:
        Mesh("a b\nb c\n", seed=1, profile="UNIX", gateway_root=True)
    assert "--gateway-root needs a root-candidate profile (GATEWAY)" in str(e.value)
    rc = main(["sim", "--generate", "grid:3x3", "--duration", "5", "--out", str(tmp_path / "o"),
               "--gateway-root", "-q"])
    out, err = capfd.readouterr()
    assert rc == 2 and out == ""
    assert err.strip() == ("snakemesh: error: --gateway-root needs a root-candidate profile (GATEWAY) "
                           "in the mesh: --hub-profile GATEWAY or --node-profile NAME=GATEWAY")
    assert not (tmp_path / "o").exists()


def test_sim_cli_gateway_root_puts_the_root_on_the_gateway(tmp_path, capfd):
    import json
    out = tmp_path / "o"
    assert main(["sim", "--generate", "grid:3x3", "--duration", "20", "--out", str(out), "-q",
                 "--node-profile", "1_1=GATEWAY", "--gateway-root"]) == 0
    truth = json.loads((out / "truth.json").read_text())
    keys = truth["nodes"]
    assert keys["1_1"].startswith("ff") and max(keys.values()) == keys["1_1"]
    assert not any(k.startswith("ff") for n, k in keys.items() if n != "1_1")
    assert truth["params"]["gateway_root"] is True
    assert truth["summary"]["snake_converged_s"] is not None      # the tree agreed on it


def test_sim_a_single_gateway_node_becomes_the_root():
    """--node-profile NAME=GATEWAY: that node gets a root key, and the tree
    the routers build (seed rules, unchanged) has it as its root."""
    topo = T.generate("grid:4x4")
    name = topo.names[5]
    m = Mesh(topo, seed=2, profile="ESP32_GENERIC", node_profiles={name: "GATEWAY"},
             gateway_root=True)
    assert m.expected_root(name) == name
    assert m.converge(timeout=60.0) is not None, m.problems()
    assert m.tree_converged()         # every node's root is the highest key: the gateway's


@pytest.mark.slow  # node processes
def test_process_mesh_draws_keys_as_the_simulator(tmp_path):
    from host_tools.procmesh.mesh import ProcessMesh
    topo = tmp_path / "t.txt"
    topo.write_text("a b\nb c\nc d\nd a\nb d\n")
    m = ProcessMesh(str(topo), str(tmp_path / "out"), seed=4, profile="UNIX",
                    node_profiles={"c": "GATEWAY"}, gateway_root=True)
    sim = Mesh(topo.read_text(), seed=4, profile="UNIX", node_profiles={"c": "GATEWAY"},
               gateway_root=True)
    for n in "abcd":
        assert m.keys[n] == sim.key(n)
    assert m.keys["c"][:1] == simkeys.SIM_ROOT_PREFIX
    assert max(m.keys, key=lambda n: m.keys[n]) == "c"
