"""Routers that follow the reference Pinecone's control timing, to mix with
snakemesh's own policy in one simulated mesh (interop tests, bench figure 6).

Same router core, same rules and wire format; only the timing policy of
docs/reference/PROTOCOL_NOTES.md "snakemesh's own choices" is the reference's:
  - a bootstrap every 5 s (snek.BOOTSTRAP_INTERVAL_MS), and one soon after
    a change of parent, root or descending entry, without the ramp;
  - its own wakeup flooded every 60 s with hop limit 5 (when the
    application switched wakeup broadcasts on, as the reference's own
    simulator does), and sent to a new peer on its first announcement;
  - no bootstrap for an accepted wakeup (_handleBroadcast only records,
    reports and relays it; _bootstrapSoon follows a change of parent or
    descending entry);
  - routes and the descending entry expire 10 s after the last bootstrap
    (the same as snakemesh: snek.ROUTE_EXPIRY_MS, DESC_EXPIRY_MS);
  - traffic it originates carries hop limit 10 (router/packetconn.go) and
    its relays never count a traffic hop limit down (hop limiting is off
    unless the application switches it on).

    from host_tools.sim.reftiming import ReferenceTimingRouter, mixed
    Mesh(topo, router_class=ReferenceTimingRouter)            # all reference timing
    Mesh(topo, router_class=mixed(lambda key: key[0] & 1))    # per node, by key
"""
from snake import wire
from snake.router import Router, WAKEUP_INTERVAL_MS
from snake.snek import BOOTSTRAP_INTERVAL_MS


class ReferenceTimingRouter(Router):
    """snake.router.Router with the reference's control timing."""

    timing = "reference"

    def __init__(self, profile, signer, now, pool=None):
        Router.__init__(self, profile, signer, now, pool)
        self.wakeup_every = WAKEUP_INTERVAL_MS
        self.wakeup_hops = wire.HOP_LIMIT_WAKEUP
        self.bs_interval = BOOTSTRAP_INTERVAL_MS
        self.bs_ramp_ms = ()
        self.bs_ramp = 0
        self.tree.reseq_early = 0     # a root re-announces every 30 min only
        self.tree.reseq_due = 0
        self.hop_limiting = False
        self.traffic_hop_limit = wire.HOP_LIMIT_TRAFFIC

    def snake_changed(self):
        # the reference's _bootstrapSoon, no ramp
        self.bootstrap_soon = True

    def _wakeup_news(self, buf, off, known, now):
        # the reference's _handleBroadcast never calls _bootstrapSoon
        return False


def mixed(is_reference):
    """A router_class for Mesh: ReferenceTimingRouter for the nodes whose
    public key (bytes) makes is_reference(key) true, Router for the rest."""
    def make(profile, signer, now):
        cls = ReferenceTimingRouter if is_reference(bytes(signer.public)) else Router
        return cls(profile, signer, now)
    return make
