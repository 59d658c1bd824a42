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


@pytest.mark.parametrize(("lost", "duplicated", "in_doubt", "code"),
                         [(0, 0, 0, 0), (1, 0, 0, 1), (0, 2, 0, 1), (0, 0, 1, 1)])
def test_faults_exits_non_zero_when_exactly_once_broke(monkeypatch, capsys, lost, duplicated, in_doubt, code):
    def pipeline(tmp: Path, seed: int, crashes: int) -> faults.Outcome:
        return faults.Outcome("fake", 4, 100, 100 - lost + duplicated, lost, duplicated, in_doubt)

    monkeypatch.setattr(faults, "PIPELINES", {"fake": pipeline})
    assert faults.main(["--seed", "7", "fake"]) == code
    assert (f"FAULTS pipeline=fake guarantee=exactly_once crashes=4 expected=100 "
            f"committed={100 - lost + duplicated} lost={lost} duplicated={duplicated} in_doubt={in_doubt}"
            ) in capsys.readouterr().out
