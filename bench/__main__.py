"""``make bench [CASES="a b"]``: run benchmark cases, print one ``BENCH`` line each.

Line format: ``BENCH <case> ours=<rows/s> baseline=<rows/s> ratio=<ours/baseline> equal=<bool>``;
the same figures go to ``bench/results/<case>.json``. Cases register in ``CASES`` as
they are built (kafka_read, kafka_write, jdbc_write, window_*).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Result:
    case: str
    ours: float
    baseline: float
    equal: bool

    @property
    def ratio(self) -> float:
        return self.ours / self.baseline if self.baseline else float("nan")

    def line(self) -> str:
        return (f"BENCH {self.case} ours={self.ours:.0f} baseline={self.baseline:.0f} "
                f"ratio={self.ratio:.2f} equal={str(self.equal).lower()}")


CASES: dict[str, Callable[[], Result]] = {}


def main(argv: list[str]) -> int:
    names = argv or sorted(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"unknown bench case(s) {unknown}; available: {sorted(CASES) or 'none yet'}", file=sys.stderr)
        return 2
    if not names:
        print("no bench cases are built yet")
        return 0
    RESULTS.mkdir(exist_ok=True)
    for name in names:
        r = CASES[name]()
        print(r.line(), flush=True)
        (RESULTS / f"{name}.json").write_text(json.dumps({**asdict(r), "ratio": r.ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
