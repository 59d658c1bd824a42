"""The windows' clock (spark_ext.clock): coalesced watermark, idleness, downtime."""

from __future__ import annotations

from spark_ext.clock import MIN, Clock

S = 1_000_000  # µs


def test_the_slowest_active_partition_holds_the_watermark():
    c, meta = Clock(lateness_us=5 * S, idle_us=10 * S), Clock.fresh()
    assert c.advance(meta, 0, [(0, 100 * S), (1, 40 * S)]) == (MIN, 35 * S)
    assert c.advance(meta, 1 * S, [(0, 120 * S)]) == (35 * S, 35 * S)


def test_an_idle_partition_stops_holding_it_back_and_it_never_goes_back():
    c, meta = Clock(lateness_us=0, idle_us=10 * S), Clock.fresh()
    c.advance(meta, 0, [(0, 100 * S), (1, 40 * S)])
    for t in range(1, 11):  # partition 0 keeps coming, partition 1 is silent
        c.advance(meta, t * S, [(0, 100 * S)])
    assert meta["wm"] == 40 * S  # exactly idle_us: not idle yet
    assert c.advance(meta, 11 * S, [(0, 100 * S)])[1] == 100 * S
    assert c.advance(meta, 12 * S, [(1, 50 * S)])[1] == 100 * S  # partition 1 is back, behind: it stays


def test_when_every_partition_is_idle_none_holds_it_back():
    c, meta = Clock(lateness_us=2 * S, idle_us=4 * S), Clock.fresh()
    c.advance(meta, 0, [(0, 160 * S), (1, 120 * S)])
    assert meta["wm"] == 118 * S
    assert c.advance(meta, 2 * S, [])[1] == 118 * S
    assert c.advance(meta, 4.5 * S, []) == (118 * S, 158 * S)


def test_downtime_is_nobodys_idleness():
    c, meta = Clock(lateness_us=0, idle_us=4 * S), Clock.fresh()
    c.advance(meta, 0, [(0, 160 * S), (1, 120 * S)])
    assert c.advance(meta, 60 * S, [(0, 170 * S)])[1] == 120 * S  # down 60 s: partition 1 not idle


def test_wake_in_when_the_next_partition_goes_idle_and_at_least_every_half_idle_timeout():
    c, meta = Clock(lateness_us=0, idle_us=4 * S), Clock.fresh()
    c.advance(meta, 0, [(0, 160 * S), (1, 120 * S)])
    assert c.wake_in(meta, 0) == 2 * S  # half the idle timeout first
    c.advance(meta, 2 * S, [])
    assert c.wake_in(meta, 2 * S) == 2 * S  # still at most half of it
    c.advance(meta, 4 * S, [])
    assert c.wake_in(meta, 4 * S) == 1000  # then just past the idle timeout
    c.advance(meta, 4.001 * S, [])
    assert c.wake_in(meta, 4.001 * S) is None  # every partition idle: nothing changes without input
    assert Clock(0, None).wake_in(meta, 0) is None
