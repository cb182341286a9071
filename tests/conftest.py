import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# bench/ holds the scenario helpers tests share with `make bench`
# (heap_scenario, fakepeer, telemetry_synth)
for p in ("firmware", "lib", os.path.join("tests", "firmware"), "bench"):
    full = os.path.join(ROOT, p)
    if full not in sys.path:
        sys.path.insert(0, full)

import pytest  # noqa: E402

# The fast tier, `make check` (pytest -m "not slow"), leaves out what starts
# node processes, a JVM, a browser or a long simulation: the modules below
# whole, and single tests of other modules marked @pytest.mark.slow where
# they stand. `make test` runs both. (tests/host/test_tiers.py checks that
# every name here is a module, so a rename cannot move one into the fast tier.)
SLOW_MODULES = frozenset((
    "test_ble_mesh.py",
    "test_console_interactive.py",
    "test_datagram_host_node.py",
    "test_datagram_interop.py",
    "test_datagram_mesh.py",
    "test_demo.py",
    "test_espnow_mesh.py",
    "test_flood.py",
    "test_gateway_analyze.py",
    "test_gateway_mesh.py",
    "test_flood_process.py",
    "test_fuzz_router_million.py",
    "test_heap_32bit.py",
    "test_heap_after_boot.py",
    "test_mpy_cross.py",
    "test_node_command.py",
    "test_node_console.py",
    "test_node_fakepeer.py",
    "test_node_heap.py",
    "test_node_mesh.py",
    "test_pipeline.py",
    "test_pipeline_cli.py",
    "test_pipeline_cluster.py",
    "test_pipeline_jvm_death.py",
    "test_process_mesh.py",
    "test_report.py",
    "test_secrets.py",
))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if os.path.basename(str(item.path)) in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
