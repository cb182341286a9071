"""The Makefile's Debian packages (gcc-multilib for `make mp32`, chromium for
the report test) go through scripts/apt-install: no apt at all when the
package is installed, and while another apt-get holds the dpkg lock it waits
instead of failing the build at once. apt-get, dpkg-query and the compiler
are fakes on a PATH of their own: nothing is installed.
"""
import os
import shutil
import stat
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "apt-install")

# apt-get that logs its arguments and, like the real one while another apt
# runs, fails on the lock: always without DPkg::Lock::Timeout (the real one
# would fail at once), and $LOCKED_TRIES more times with it
FAKE_APT = r"""#!/bin/bash
echo "apt-get $*" >> "$FAKE_LOG"
case "$*" in
  *DPkg::Lock::Timeout=*) ;;
  *) echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
     echo "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?" >&2
     exit 100;;
esac
n=$(cat "$FAKE_LOCKED" 2>/dev/null || echo 0)
if [ "$n" -gt 0 ]; then
  echo $((n - 1)) > "$FAKE_LOCKED"
  echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2
  exit 100
fi
for a in "$@"; do [ "$a" = install ] && inst=1; done
if [ -n "$inst" ]; then
  for a in "$@"; do case "$a" in -*|install|DPkg*) ;; *) echo "$a" >> "$FAKE_INSTALLED";; esac; done
fi
exit 0
"""
FAKE_DPKG_QUERY = r"""#!/bin/bash
pkg="${@: -1}"
if grep -qx "$pkg" "$FAKE_INSTALLED" 2>/dev/null; then printf installed; exit 0; fi
echo "dpkg-query: no packages found matching $pkg" >&2
exit 1
"""
FAKE_SUDO = '#!/bin/bash\nexec "$@"\n'
NO_CC = "#!/bin/bash\nexit 1\n"


def _exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def fake(tmp_path):
    """(env, log path, installed path): PATH holds the fakes and the few
    tools the script and the recipes use, nothing else (no chromium, no
    real apt)."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _exe(str(bin_ / "apt-get"), FAKE_APT)
    _exe(str(bin_ / "dpkg-query"), FAKE_DPKG_QUERY)
    _exe(str(bin_ / "sudo"), FAKE_SUDO)
    _exe(str(bin_ / "no-cc"), NO_CC)
    for tool in ("bash", "env", "grep", "id", "sleep", "cat", "make"):
        real = shutil.which(tool)
        assert real, tool
        os.symlink(real, str(bin_ / tool))
    log, installed = tmp_path / "apt.log", tmp_path / "installed"
    installed.write_text("")
    env = dict(os.environ, PATH=str(bin_), FAKE_LOG=str(log), FAKE_INSTALLED=str(installed),
               FAKE_LOCKED=str(tmp_path / "locked"), APT_LOCK_POLL="0")
    return env, log, installed, tmp_path


def _make(env, target):
    return subprocess.run(["make", "-s", "-C", ROOT, target, "CC=no-cc"], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("target,package", [("mp32-deps", "gcc-multilib"), ("chromium", "chromium")])
def test_installed_package_needs_no_apt(fake, target, package):
    env, log, installed, _ = fake
    installed.write_text(package + "\n")
    r = _make(env, target)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not log.exists(), log.read_text()


@pytest.mark.parametrize("target,package", [("mp32-deps", "gcc-multilib"), ("chromium", "chromium")])
def test_missing_package_waits_for_the_lock(fake, target, package):
    env, log, installed, tmp = fake
    (tmp / "locked").write_text("3")       # another apt holds the lock for 3 tries
    r = _make(env, target)
    assert r.returncode == 0, r.stdout + r.stderr
    assert installed.read_text().split() == [package]
    calls = log.read_text().splitlines()
    assert all("-o DPkg::Lock::Timeout=600" in c for c in calls), calls
    assert calls[-1].endswith("install -y -qq " + package), calls
    assert "waiting" in r.stderr


def test_lock_never_released_fails_with_apts_message(fake):
    env, log, installed, tmp = fake
    (tmp / "locked").write_text("1000")
    env = dict(env, APT_LOCK_WAIT="0")
    r = subprocess.run([SCRIPT, "test", "gcc-multilib"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert "Could not get lock" in r.stderr
    assert installed.read_text() == ""


def test_usage(fake):
    env = fake[0]
    r = subprocess.run([SCRIPT, "only-a-reason"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == "usage: scripts/apt-install WHY PACKAGE..."
