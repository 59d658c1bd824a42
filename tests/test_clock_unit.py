"""The windows' clock (spark_ext.windows.clock): coalesced watermark, idleness, downtime."""

from __future__ import annotations

from spark_ext.windows.clock import MIN, Clock, ClockState, PartitionMark

S = 1_000_000  # µs


class Driven:
    """A clock and its state, advanced call by call as stage 2 does (the state is replaced)."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.state = clock, Clock.fresh()

    def advance(self, now: float, seen: list[tuple[int, int]]) -> tuple[int, int]:
        """(watermark before, watermark now), as the call moved it."""
        before, self.state = self.state, self.clock.advance(self.state, now, seen)
        return before.watermark, self.state.watermark

    def wake_in(self, now: float) -> float | None:
        return self.clock.wake_in(self.state, now)


def test_the_slowest_active_partition_holds_the_watermark():
    c = Driven(Clock(lateness_us=5 * S, idle_us=10 * S))
    assert c.advance(0, [(0, 100 * S), (1, 40 * S)]) == (MIN, 35 * S)
    assert c.advance(1 * S, [(0, 120 * S)]) == (35 * S, 35 * S)


def test_an_idle_partition_stops_holding_it_back_and_it_never_goes_back():
    c = Driven(Clock(lateness_us=0, idle_us=10 * S))
    c.advance(0, [(0, 100 * S), (1, 40 * S)])
    for t in range(1, 11):  # partition 0 keeps coming, partition 1 is silent
        c.advance(t * S, [(0, 100 * S)])
    assert c.state.watermark == 40 * S  # exactly idle_us: not idle yet
    assert c.advance(11 * S, [(0, 100 * S)])[1] == 100 * S
    assert c.advance(12 * S, [(1, 50 * S)])[1] == 100 * S  # partition 1 is back, behind: it stays


def test_when_every_partition_is_idle_none_holds_it_back():
    c = Driven(Clock(lateness_us=2 * S, idle_us=4 * S))
    c.advance(0, [(0, 160 * S), (1, 120 * S)])
    assert c.state.watermark == 118 * S
    assert c.advance(2 * S, [])[1] == 118 * S
    assert c.advance(4.5 * S, []) == (118 * S, 158 * S)


def test_downtime_is_nobodys_idleness():
    c = Driven(Clock(lateness_us=0, idle_us=4 * S))
    c.advance(0, [(0, 160 * S), (1, 120 * S)])
    assert c.advance(60 * S, [(0, 170 * S)])[1] == 120 * S  # down 60 s: partition 1 not idle


def test_wake_in_when_the_next_partition_goes_idle_and_at_least_every_half_idle_timeout():
    c = Driven(Clock(lateness_us=0, idle_us=4 * S))
    c.advance(0, [(0, 160 * S), (1, 120 * S)])
    assert c.wake_in(0) == 2 * S  # half the idle timeout first
    c.advance(2 * S, [])
    assert c.wake_in(2 * S) == 2 * S  # still at most half of it
    c.advance(4 * S, [])
    assert c.wake_in(4 * S) == 1000  # then just past the idle timeout
    c.advance(4.001 * S, [])
    assert c.wake_in(4.001 * S) is None  # every partition idle: nothing changes without input
    assert Clock(0, None).wake_in(c.state, 0) is None


def test_advance_returns_a_new_state_and_leaves_the_old_one_as_it_was():
    clock = Clock(lateness_us=0, idle_us=4 * S)
    old = clock.advance(Clock.fresh(), 0, [(0, 160 * S), (1, 120 * S)])
    snapshot = ClockState(old.watermark, dict(old.parts), old.now)
    new = clock.advance(old, 60 * S, [(0, 170 * S), (2, 90 * S)])  # downtime shifts every last_seen
    assert new is not old and new.parts is not old.parts
    assert old == snapshot
    assert new.parts == {0: PartitionMark(170 * S, 60 * S), 1: PartitionMark(120 * S, 60 * S),
                         2: PartitionMark(90 * S, 60 * S)}
    assert (old.watermark, new.watermark) == (120 * S, 120 * S)
    assert Clock.fresh() == ClockState(MIN, {}, None)
