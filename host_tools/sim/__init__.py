"""Virtual-time mesh simulator: the shipped sans-I/O router core of every
node on one discrete-event clock (docs/guides/SIMULATOR.md).

Modules: engine (clock and event heap), topology (files and generators),
keys (deterministic node keys), links (latency, bandwidth, loss, FIFO),
probes (pings and ground truth), telemetry (record writer), scenario
(scripted events), harness (`Mesh`, used by the router tests), runner
(`snakemesh sim`)."""
import host_tools  # noqa: F401  (puts firmware/ and lib/ on sys.path)
