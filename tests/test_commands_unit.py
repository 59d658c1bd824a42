"""`make bench` and `make faults` fail when a guarantee breaks or outputs differ (pure logic)."""

from __future__ import annotations

from pathlib import Path

import pytest

import bench.__main__ as bench_main
from bench import faults
from bench.common import Result


@pytest.mark.parametrize(("equal", "code"), [(True, 0), (False, 1)])
def test_bench_exits_non_zero_when_the_output_differs(monkeypatch, tmp_path, capsys, equal, code):
    monkeypatch.setattr(bench_main, "CASES", {"fake": "x:y"})
    monkeypatch.setattr(bench_main, "RESULTS", tmp_path)
    monkeypatch.setattr(bench_main, "_run", lambda name: Result(name, 2.0, 1.0, equal))
    assert bench_main.main(["fake"]) == code
    assert f"BENCH fake ours=2 baseline=1 ratio=2.00 equal={str(equal).lower()}" in capsys.readouterr().out


@pytest.mark.parametrize(("lost", "duplicated", "in_doubt", "status"),
                         [(0, 0, 0, "held"), (1, 0, 0, "broken"), (0, 2, 0, "broken"), (0, 0, 1, "broken")])
def test_faults_exits_non_zero_when_exactly_once_broke(monkeypatch, capsys, lost, duplicated, in_doubt,
                                                      status):
    def pipeline(tmp: Path, seed: int, crashes: int) -> faults.Outcome:
        return faults.Outcome("fake", 4, 100, 100 - lost + duplicated, lost, duplicated, in_doubt, due=100,
                              replay="make faults SEED=7 PIPELINES=fake")

    monkeypatch.setattr(faults, "PIPELINES", {"fake": pipeline})
    assert faults.main(["--seed", "7", "fake"]) == (0 if status == "held" else 1)
    out = capsys.readouterr()
    assert (f"FAULTS pipeline=fake status={status} guarantee=exactly_once crashes=4 expected=100 due=100 "
            f"committed={100 - lost + duplicated} lost={lost} duplicated={duplicated} in_doubt={in_doubt}"
            ) in out.out
    if status == "broken":
        last = out.err.rstrip().splitlines()[-1]
        assert last == "fake: guarantee broken; replay with `make faults SEED=7 PIPELINES=fake`"


@pytest.mark.parametrize(("lost", "in_doubt", "status"), [(0, 0, "interrupted"), (0, 2, "interrupted"),
                                                          (3, 0, "broken")])
def test_a_campaign_broken_off_is_interrupted_unless_something_due_is_missing(lost, in_doubt, status):
    """A run broken off counts only what its committed batches had read (``due``); a batch
    it left in doubt is the next run's to finish, not a broken guarantee."""
    o = faults.Outcome("fake", 2, 1000, 300 - lost, lost, 0, in_doubt,
                       error="`services up kafka` failed: x\ny", due=300)
    assert o.status == status and not o.held
    assert o.line().endswith('reason="`services up kafka` failed: x y"')
    assert f"status={status} " in o.line() and "due=300" in o.line()


def test_services_up_starts_a_service_that_died_while_starting_once_more(monkeypatch):
    """The control flow only (a real broker cannot be made to die on its first start on
    purpose): one death is retried from a clean stop, a second one is an error naming it."""
    import services
    from services.common import ServiceDiedError, ServiceError

    calls: list[str] = []

    def flaky(deaths: int):
        def start() -> None:
            calls.append("start")
            if calls.count("start") <= deaths:
                raise ServiceDiedError("fake exited during start; see fake.log:\nCorruptRecordException")
        return start

    monkeypatch.setattr(services, "_stop_pid", lambda name, timeout=30.0: calls.append(f"stop {name}"))
    monkeypatch.setattr(services, "_port_open", lambda port: False)
    monkeypatch.setattr(services, "_read_pid", lambda name: None)
    monkeypatch.setitem(services.SERVICES, "fake", (1, None, None, flaky(1)))
    services._ensure("fake")
    assert calls == ["start", "stop fake", "start"]
    calls.clear()
    monkeypatch.setitem(services.SERVICES, "fake", (1, None, None, flaky(2)))
    with pytest.raises(ServiceError, match=r"(?s)fake died twice while starting: .*CorruptRecordException"):
        services._ensure("fake")
