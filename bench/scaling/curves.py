"""A scaling curve: series of (x, y) points, its ``CURVE`` lines, JSON and chart."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"


def scale_quick() -> bool:
    """``SCALE_QUICK=1``: each curve's smoke-test size (fewer points, smaller inputs)."""
    return os.environ.get("SCALE_QUICK", "") not in ("", "0")


@dataclass
class Curve:
    """``series``: name -> [(x, y), ...] in the order measured. ``log_x``/``log_y``: axes
    drawn on a log scale (tasks and sizes grow by factors). ``notes``: what a reader needs
    to read the figure (the machine, the input, what was timed)."""

    case: str
    title: str
    x_label: str
    y_label: str
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    log_x: bool = True
    log_y: bool = False
    notes: list[str] = field(default_factory=list)
    equal: bool = True  # every measured output held what its input said (checked by the case)
    complete: bool = True  # every point was measured (a case may stop a point past its time limit)

    def add(self, series: str, x: float, y: float) -> None:
        """One point, printed at once so a long case shows its progress."""
        self.series.setdefault(series, []).append((x, y))
        print(f"CURVE {self.case} series={series.replace(' ', '_')} x={x:g} y={y:.1f}", flush=True)

    def at(self, series: str, x: float) -> float | None:
        return next((y for px, y in self.series.get(series, []) if px == x), None)


def save(curve: Curve, results: Path = RESULTS) -> Path:
    """``<case>.json`` under ``results``; the chart beside it when matplotlib is there."""
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{curve.case}.json"
    path.write_text(json.dumps({"kind": "curve", **asdict(curve)}, indent=2))
    try:
        draw(curve, results / f"{curve.case}.png")
    except ImportError as e:
        print(f"no chart for {curve.case}: {e} (pip install -e '.[docs]')", file=sys.stderr)
    return path


def load(path: Path) -> Curve:
    doc = json.loads(path.read_text())
    doc.pop("kind", None)
    doc["series"] = {k: [(float(x), float(y)) for x, y in v] for k, v in doc["series"].items()}
    return Curve(**doc)


def draw(curve: Curve, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, points in curve.series.items():
        xs, ys = zip(*points, strict=True) if points else ((), ())
        ax.plot(xs, ys, marker="o", linewidth=1.5, label=name)
    if curve.log_x:
        ax.set_xscale("log")
    if curve.log_y:
        ax.set_yscale("log")
    xs_all = sorted({x for pts in curve.series.values() for x, _ in pts})
    if xs_all:
        ax.set_xticks(xs_all)
        ax.set_xticklabels([f"{x:g}" for x in xs_all])
        ax.minorticks_off() if curve.log_x else None
    ax.set_xlabel(curve.x_label)
    ax.set_ylabel(curve.y_label)
    ax.set_title(curve.title, fontsize=10, loc="left")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _curves(results: Path) -> list[Curve]:
    out = []
    for path in sorted(results.glob("scale_*.json")):
        doc: Any = json.loads(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "curve":
            out.append(load(path))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="redraw the scaling charts from their results")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--out", type=Path, required=True, help="e.g. docs/assets/bench")
    args = ap.parse_args(argv)
    for c in _curves(args.results):
        print(draw(c, args.out / f"{c.case}.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
