"""Virtual platform for the routers of a `Mesh`: while a mesh runs,
snake.platform's clocks and randomness are the mesh's seeded virtual ones
(so a run is reproducible bit for bit) and signature checks are shared
between nodes (`VerifyMemo`)."""
import sys

from hashlib import blake2b as _blake2b


class VerifyMemo:
    """snake.crypto.verify with memory, shared by every node of a mesh.

    In a simulation every node checks the same signatures (an announcement
    signed at the root is verified by every node below it, a bootstrap by
    every node on its path): the same (key, message, signature) triple is
    verified ~8 times on average, and the ed25519 check was a quarter of the
    simulator's time. verify is a pure function, so answering a repeated
    triple from memory changes no outcome: every router still makes the
    same call and counts it (verify_done / verify_cached) as before.
    A triple is remembered by a 128-bit BLAKE2b digest of key, signature
    and message (messages of deep announcements run to kilobytes).
    Bounded: two generations of `size` entries (a hit in the older one
    moves to the newer one; when the newer one is full the older one is
    dropped)."""

    def __init__(self, verify, size=32768):
        self.verify = verify
        self.size = size
        self.new = {}
        self.old = {}
        self.calls = 0
        self.backend = 0

    def __call__(self, pub, msg, sig):
        self.calls += 1
        try:
            if len(pub) != 32 or len(sig) != 64:
                raise TypeError
            key = _blake2b(b"".join((pub, sig, msg)), digest_size=16).digest()
        except TypeError:               # not bytes-like: the real check says why
            self.backend += 1
            return self.verify(pub, msg, sig)
        new = self.new
        ok = new.get(key)
        if ok is None:
            ok = self.old.get(key)
            if ok is None:
                self.backend += 1
                ok = self.verify(pub, msg, sig)
            if len(new) >= self.size:
                self.old = new
                self.new = new = {}
            new[key] = ok
        return ok


class _Virtual:
    """While active, snake.platform's wall_ms / urandom / ticks_ms (and any
    snake.* module's own binding of them) are the mesh's virtual versions,
    and snake.crypto's verify is the mesh's VerifyMemo."""

    NAMES = ("wall_ms", "urandom", "ticks_ms", "verify")

    def __init__(self, mesh):
        self.mesh = mesh
        self.saved = None

    def __enter__(self):
        m = self.mesh
        if m._patched is not None:       # nested
            return self
        import snake.platform as plat
        import snake.crypto as crypto
        repl = {"wall_ms": m._wall_ms, "urandom": m._urandom, "ticks_ms": m._now_ms}
        orig = {k: getattr(plat, k) for k in self.NAMES if k in repl}
        if m.verify_memo:
            orig["verify"] = crypto.verify
            if m._verify_memo is None or m._verify_memo.verify is not crypto.verify:
                m._verify_memo = VerifyMemo(crypto.verify)
            repl["verify"] = m._verify_memo
        saved = []
        for modname in list(sys.modules):
            if modname != "snake" and not modname.startswith("snake."):
                continue
            mod = sys.modules.get(modname)
            if mod is None:
                continue
            for k in orig:
                if getattr(mod, k, None) is orig[k]:
                    saved.append((mod, k, orig[k]))
                    setattr(mod, k, repl[k])
        m._patched = saved
        self.saved = saved
        return self

    def __exit__(self, *exc):
        if self.saved is None:
            return False
        for mod, k, v in self.saved:
            setattr(mod, k, v)
        self.mesh._patched = None
        return False
