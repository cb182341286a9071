"""Subcommands of the `snakemesh` CLI, one module per concern.

Each module defines `register(subparsers)`, which adds its subcommand(s) and
sets `func=run_function` on each parser via set_defaults. The CLI imports the
modules listed in COMMAND_MODULES that exist.
"""
COMMAND_MODULES = [
    "flash",      # snakemesh flash
    "deploy",     # snakemesh deploy, build-mpy
    "keys",       # snakemesh keygen, provision
    "inspect",    # status, peers, tree, snake, routes, stats, ping, trace, monitor, console
    "datagram",   # snakemesh send, recv
    "node",       # snakemesh node (unix-port firmware node)
    "gateway",    # snakemesh gateway (telemetry over the mesh to files and MQTT)
    "sim",        # snakemesh sim (virtual-time simulator)
    "mesh",       # snakemesh mesh (process mesh)
    "plan",       # snakemesh plan (capacity planner)
    "analyze",    # snakemesh analyze, report (Spark pipeline)
    "demo",       # snakemesh demo
]
