"""Virtual-time mesh simulator: the shipped sans-I/O router core of every
node on one discrete-event clock (docs/guides/SIMULATOR.md).

Modules: engine (clock and event heap), topology (files and generators),
keys (deterministic node keys), links (latency, bandwidth, loss, FIFO),
probes (ping payloads and ground truth), telemetry (record writer),
scenario (scripted events), profiles (board profiles per node),
reftiming (the reference router's timers, for comparison); harness
(`Mesh`, used by the router tests) assembled from nodes (per-node state),
transport (links and frames), probing (pings and traffic), faults (crash,
restart, link changes, partition, join), sampling (telemetry records,
convergence, capacity) and virtual (the virtual platform); runner
(`snakemesh sim`). Imports point one way, from runner down to engine."""
import host_tools  # noqa: F401  (puts firmware/ and lib/ on sys.path)
