"""`make demo` prints ratios as percentages (the end-to-end run is
tests/host/test_demo.py); the numbers people read are rounded."""
from host_tools.commands.demo import health_lines
from host_tools.commands.mesh import percent


def test_percent():
    assert percent(16, 16) == "100%"
    assert percent(15, 16) == "93.8%"
    assert percent(0, 16) == "0%"
    assert percent(1999, 2000) == "99.9%"       # never rounded up to a false 100%
    assert percent(0, 0) == "n/a"


def test_health_lines_in_percent():
    s = {"nodes": 8, "records": 551, "rejected_records": 2, "tree_converged_s": 1.234,
         "snake_converged_s": 3.0, "snake_correct_ratio_final": 0.875, "ping_delivery_ratio": 0.9375,
         "pings": 16, "rtt_ms_p50": 21.234, "rtt_ms_p95": 71.0, "stretch_mean": 1.0526, "stretch_p95": 1.25,
         "capacity_warnings": [{"node": "ab" * 32, "name": "hub", "table": "routes", "used": 32,
                                "capacity": 32, "refused": 5}]}
    assert health_lines(s) == [
        "8 nodes, 551 telemetry records (2 rejected)",
        "tree converged after 1.2 s, snake after 3.0 s; snake neighbours right at the end: 87.5%",
        "ping delivery 93.8% of 16 pings, rtt median 21.2 ms, p95 71.0 ms",
        "path stretch (hops taken / shortest) mean 1.05x, p95 1.25x",
        "tables that bound the mesh: hub routes 32/32 (5 refused)",
    ]
    s.update(tree_converged_s=None, snake_correct_ratio_final=None, capacity_warnings=[])
    lines = health_lines(s)
    assert lines[1] == "tree converged after never, snake after 3.0 s; snake neighbours right at the end: n/a"
    assert lines[-1] == "tables that bound the mesh: no table full or refusing"


def test_health_lines_show_application_datagrams():
    s = {"nodes": 3, "records": 10, "ping_delivery_ratio": 1.0, "pings": 2, "datagrams": 8,
         "app_delivery_ratio": 0.875, "ack_latency_ms_p50": 4.0, "ack_latency_ms_p95": 9.5}
    assert ("application datagrams delivered 87.5% of 8 (acknowledged end to end), ack latency median "
            "4.0 ms, p95 9.5 ms") in health_lines(s)
    s["datagrams"] = 0
    assert not any("datagrams" in l for l in health_lines(s))
