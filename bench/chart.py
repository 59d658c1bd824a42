"""Charts of bench results: each case's ratio, and the windows' throughput against size/slide.

``make bench`` calls ``write_charts(bench/results)`` after its cases, so the PNGs sit next to
the JSON they come from. The benchmarks page shows charts committed under
``docs/assets/bench/``; redraw them from a run's results with
``python -m bench.chart --out docs/assets/bench`` (or from a saved set of figures with
``--figures FILE``) and commit them with the figures.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
RATIOS_PNG = "ratios.png"
WINDOWS_PNG = "windows.png"
# window_sliding_<k>: k = size/slide, the number of windows each event falls into.
_SLIDING = re.compile(r"^window_sliding_(\d+)$")


def load(results_dir: Path) -> list[dict[str, Any]]:
    """The per-case results ``make bench`` wrote (``<case>.json``), sorted by case."""
    found = []
    for path in sorted(results_dir.glob("*.json")):
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and {"case", "ours", "baseline"} <= doc.keys():
            found.append(doc)
    return found


def _ratio(r: dict[str, Any]) -> float:
    """The recorded ratio (from unrounded rates) when there is one."""
    if r.get("ratio") is not None:
        return float(r["ratio"])
    return float(r["ours"]) / float(r["baseline"]) if r["baseline"] else float("nan")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI or a server
    import matplotlib.pyplot as plt

    return plt


def ratio_chart(results: Sequence[dict[str, Any]], out: Path, title: str) -> Path:
    """One bar per case: ours / baseline, with the line where both are equal, and the
    spread of the warm rounds' ratios as a whisker where the case has one."""
    plt = _pyplot()
    cases = [str(r["case"]) for r in results]
    ratios = [_ratio(r) for r in results]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(cases) + 1.4))
    colors = ["#2e7d32" if x >= 1 else "#c62828" for x in ratios]
    # Cases timed in rounds carry the warm rounds' spread (paired ratios): a whisker.
    nan = float("nan")
    lo = [x - float(r["spread"][0]) if r.get("spread") else nan for r, x in zip(results, ratios, strict=True)]
    hi = [float(r["spread"][1]) - x if r.get("spread") else nan for r, x in zip(results, ratios, strict=True)]
    whiskers = any(h == h for h in hi)
    bars = ax.barh(cases, ratios, color=colors, xerr=[lo, hi] if whiskers else None,
                   error_kw={"elinewidth": 1, "capsize": 3})
    ax.bar_label(bars, labels=[f"{x:.2f}" for x in ratios], padding=3, fontsize=9)
    ax.axvline(1.0, color="#444444", linewidth=1, linestyle="--")
    ax.invert_yaxis()  # first case on top, as in the table
    ax.set_xlabel("ratio: ours / baseline throughput (higher is better; 1 = equal)")
    ends = [x + (h if h == h else 0.0) for x, h in zip(ratios, hi, strict=True)]
    ax.set_xlim(0, max([1.0, *[e for e in ends if e == e]]) * 1.15)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def window_chart(results: Sequence[dict[str, Any]], out: Path, title: str) -> Path | None:
    """Events/s of ours and of Spark's window aggregation against size/slide; None without
    at least two sliding cases."""
    points = sorted((int(m.group(1)), float(r["ours"]), float(r["baseline"]))
                    for r in results if (m := _SLIDING.match(str(r["case"]))))
    if len(points) < 2:
        return None
    plt = _pyplot()
    ks = [p[0] for p in points]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(ks, [p[1] / 1000 for p in points], marker="o", label="spark-ext (frames)")
    ax.plot(ks, [p[2] / 1000 for p in points], marker="s", label="Spark window()")
    ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("size / slide (windows per event)")
    ax.set_ylabel("thousand events/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def write_charts(results: Sequence[dict[str, Any]], out_dir: Path, title: str) -> list[Path]:
    """The ratio chart and, when the results hold sliding-window cases, the window chart."""
    if not results:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [ratio_chart(results, out_dir / RATIOS_PNG, f"make bench: {title}")]
    windows = window_chart(results, out_dir / WINDOWS_PNG, f"Sliding windows: {title}")
    return written + ([windows] if windows else [])


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.chart", description=__doc__.split("\n")[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="a directory of <case>.json results")
    ap.add_argument("--figures", type=Path,
                    help="a JSON file {'title': ..., 'results': [{case, ours, baseline, ...}]} instead")
    ap.add_argument("--out", type=Path, help="where the PNGs go (default: next to the results)")
    ap.add_argument("--title", help="the charts' subtitle (default: the figures' title, or 'latest results')")
    args = ap.parse_args(argv)
    if args.figures is not None:
        doc = json.loads(args.figures.read_text())
        results, title, out = doc["results"], args.title or doc.get("title"), args.out or args.figures.parent
    else:
        results, title, out = load(args.results), args.title, args.out or args.results
    written = write_charts(results, out, title or "latest results")
    if not written:
        print(f"no results to chart in {args.figures or args.results}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
