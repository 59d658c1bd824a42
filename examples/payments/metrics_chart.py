"""The demo's metrics, as a reader of the monitoring page sees them: the job serves
``spark_ext.monitoring``, this scrapes it once a second (through the kill -9 and the
restart, when nothing answers), writes the samples as CSV and draws them."""

from __future__ import annotations

import csv
import threading
import time
import urllib.request
from pathlib import Path

from examples.payments.job import QUERY

COLUMNS = ("t", "batch_id", "lag_records_max", "sink_rows_total", "input_rows_per_second", "up")


class MetricsSampler:
    def __init__(self, port: int) -> None:
        self.port = port
        self.rows: list[dict[str, float]] = []
        self.marks: list[tuple[float, str]] = []
        self._t0 = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._thread.start()

    def mark(self, what: str) -> None:
        self.marks.append((time.monotonic() - self._t0, what))

    def stop(self) -> None:
        self._done.set()
        self._thread.join(10)

    def _run(self) -> None:
        from prometheus_client.parser import text_string_to_metric_families

        while not self._done.wait(1.0):
            row = {"t": round(time.monotonic() - self._t0, 1), "up": 0.0}
            try:
                url = f"http://127.0.0.1:{self.port}/metrics"
                text = urllib.request.urlopen(url, timeout=2).read().decode()
            except OSError:
                self.rows.append(row)  # the job is down (killed) or not serving yet
                continue
            row["up"] = 1.0
            for fam in text_string_to_metric_families(text):
                for s in fam.samples:
                    if s.labels.get("query") != QUERY:
                        continue
                    key = {"spark_ext_query_batch_id": "batch_id",
                           "spark_ext_source_lag_records_max": "lag_records_max",
                           "spark_ext_sink_rows_total": "sink_rows_total",
                           "spark_ext_query_input_rows_per_second": "input_rows_per_second"}.get(s.name)
                    if key is not None:
                        row[key] = s.value
            self.rows.append(row)

    def chart(self, csv_path: Path, png: Path) -> str:
        """Write the samples and draw them; returns a line saying where."""
        with csv_path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            for r in self.rows:
                w.writerow({c: r.get(c, "") for c in COLUMNS})
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return f"metrics samples in {csv_path} (no chart: matplotlib is not installed)"
        panels = (("lag_records_max", "Kafka lag (records, largest partition)"),
                  ("sink_rows_total", "rows committed (the routing sink: every sub-sink's rows together)"),
                  ("input_rows_per_second", "input rows/s"))
        fig, axes = plt.subplots(len(panels), 1, figsize=(9, 7), sharex=True)
        for ax, (key, title) in zip(axes, panels, strict=True):
            # a sample without the value (the job down, or its query not started) breaks the line
            ts = [r["t"] for r in self.rows]
            ys = [r.get(key, float("nan")) for r in self.rows]
            if ts:
                ax.plot(ts, ys, marker=".", linewidth=1)
            ax.set_title(title, fontsize=10, loc="left")
            for t, what in self.marks:
                ax.axvline(t, color="red", linestyle="--", linewidth=1)
                ax.text(t, ax.get_ylim()[1], f" {what}", color="red", fontsize=8, va="top")
            down = [r["t"] for r in self.rows if not r["up"]]
            for t in down:
                ax.axvspan(t - 0.5, t + 0.5, color="grey", alpha=0.15, linewidth=0)
        axes[-1].set_xlabel("seconds (grey: no exporter answered: the job was down or starting)")
        fig.suptitle("make demo, scraped from spark_ext.monitoring once a second", fontsize=11)
        fig.tight_layout()
        png.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(png, dpi=100)
        return f"metrics chart in {png} (samples in {csv_path})"
