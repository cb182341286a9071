"""host_tools.procmesh.soak judges the mem_free trend per process, after its warm-up,
on the upper envelope of the samples: a leak of 1.2 KB/min is caught, a
single low sample (a frame alive at the moment of the collect) and a restart
(a new heap with another baseline) are not taken for one."""
from host_tools.procmesh import soak


def judged(points, starts=None):
    return [round(soak.slope(soak.envelope(w)) * 60) for w in soak.trend_windows(points, starts)]


def test_leak_is_caught_and_dips_are_not_a_trend():
    leak = [(i * 15.0, 130000 - 300 * i - (1216 if i % 4 == 1 else 0)) for i in range(40)]
    (s,) = judged(leak)
    assert -1250 < s < -1150
    flat = [(i * 15.0, 130000 - (1216 if i in (30, 39) else 0)) for i in range(40)]
    assert judged(flat) == [0]


def test_a_restart_starts_a_new_window_after_its_warm_up():
    # 130 KB free before the restart at 300 s, 120 KB after: not a leak
    pts = [(i * 15.0, 130000 if i * 15.0 < 300 else 120000) for i in range(40)]
    assert judged(pts, [300.0]) == [0, 0]
    # restarted too late to judge the new process: only the first one counts
    assert len(soak.trend_windows(pts, [540.0])) == 1
    assert soak.trend_windows(pts[:8]) == []


def test_a_dip_of_two_samples_is_no_leak_a_leak_over_two_minutes_is():
    # soak of 2026-11-23: node delta's process lived 180 s, 4 samples after
    # its warm-up, the last two ~900 B low (a link's handshake after a
    # neighbour restarted): judged then as -1,047 B/min. Too short to judge.
    short = [(185.9, 46976), (201.4, 47008), (216.7, 46112), (232.1, 46112)]
    assert soak.trend_windows(short, [63.1]) == []
    # two minutes of samples with the same dip at the end: no leak
    dip = [(120.0 + i * 15.0, 47000 - (900 if i >= 6 else 0)) for i in range(8)]
    (s,) = judged(dip)
    assert -1024 < s <= 0
    # a 1.2 KB/min leak over two minutes is caught
    leak = [(120.0 + i * 15.0, 47000 - 300 * i) for i in range(8)]
    (s,) = judged(leak)
    assert s < -1024
