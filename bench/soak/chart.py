"""The soak's chart: memory, descriptors, durations and bookkeeping against minutes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PANELS = (
    ("resident memory (MB)", ("rss_mb", "rss_jvm_mb", "rss_python_mb", "heap_used_mb", "heap_old_mb")),
    ("open descriptors, JVM threads", ("fds", "jvm_threads")),
    ("ms (batch: triggerExecution; visible: sent to the ledger)",
     ("batch_p50_ms", "batch_p99_ms", "visible_p50_ms", "visible_p99_ms")),
    ("kept files and rows", ("checkpoint_files", "commit_rows", "staged_messages")),
)


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def draw(rows: list[dict[str, Any]], marks: list[tuple[float, str]], out: Path, minutes: float,
         ref: float) -> Path:
    """The chart of ``rows`` over ``minutes``; ``ref`` marks the minute later figures are compared with."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(PANELS), 1, figsize=(9, 10), sharex=True)
    ts = [_num(r["minute"]) for r in rows]
    for ax, (title, keys) in zip(axes, PANELS, strict=True):
        for k in keys:
            ax.plot(ts, [_num(r.get(k)) for r in rows], marker=".", linewidth=1, label=k)
        ax.set_title(title, fontsize=9, loc="left")
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(True, alpha=0.3)
        ax.axvline(ref, color="grey", linestyle=":", linewidth=1)
        for t, what in marks:
            if what.startswith("kill -9"):
                ax.axvline(t, color="red" if "job" in what else "orange", linestyle="--", linewidth=0.8)
    axes[-1].set_xlabel("minutes from the first payment (red: kill -9 of the job; orange: of a worker; "
                        "dotted: the 10-minute reference)")
    fig.suptitle(f"make soak: {minutes:g} minutes", fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
