"""Process mesh: the firmware as MicroPython unix-port (or CPython) processes
on this host, linked over loopback TCP or the emulated BLE medium
(host_tools/blemu); the real-code counterpart of the virtual-time simulator
in host_tools/sim (docs/guides/NODE.md).

Modules: nodeproc (one node process and its console), mesh
(`ProcessMesh`: many nodes from a topology, for `snakemesh mesh|demo`),
soak (the long-run heap soak, `make soak`), consoletap (a node's console
shared between a terminal and clients, for `snakemesh node`), mp32 (the
32-bit unix-port builds), options (the command-line options they share).
Imports point one way: soak -> mesh -> nodeproc; consoletap, mp32 and
options import none of them, and nothing here imports the CLI."""
import host_tools  # noqa: F401  (puts firmware/ and lib/ on sys.path)
