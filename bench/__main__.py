"""``make bench [CASES="a b"]``: run benchmark cases, print one ``BENCH`` line each.

Line format: ``BENCH <case> ours=<rows/s> baseline=<rows/s> ratio=<ours/baseline> equal=<bool>``,
then, for the cases timed in rounds (``bench.common.Rounds``: the write cases and
``peer_kafka_eo``), ``cold_ratio=<round 0's ratio> spread=<min>-<max> rounds=<n>``, where
``ours`` and ``baseline`` are the medians of the warm rounds and ``spread`` the lowest and
highest ratio of paired warm rounds; a case may add more ``name=value`` figures
(``peer_latency_eo``: ``ratio_floor``, ``ratio_native``). The same figures, and every
round's seconds of every variant, go to ``bench/results/<case>.json``, and charts of every case's latest
result beside them (``bench/chart.py``: ``ratios.png``, and ``windows.png`` for the
sliding-window cases). Cases register in ``CASES`` as they are built (kafka_read,
kafka_write, jdbc_write, window_*; peer_* against Kafka Streams and Flink, bench/peers/).

Scaling curves (``bench/scaling``) run only when named (``CURVES``; ``CASES=scale`` runs
them all): each prints ``CURVE`` lines and writes ``bench/results/<case>.json`` and
``<case>.png``.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

from bench.common import Result
from services import scratch as local_scratch

RESULTS = Path(__file__).resolve().parent / "results"

# case -> "module:function" returning a Result; imported only when the case runs.
CASES: dict[str, str] = {
    "kafka_read": "bench.kafka_read:run",
    "avro_read": "bench.avro_read:run",
    "avro_write": "bench.avro_write:run",
    "protobuf_read": "bench.protobuf_read:run",
    "kafka_read_sasl_ssl": "bench.kafka_read:run_sasl_ssl",
    "jdbc_write": "bench.jdbc_write:run",
    "mariadb_write": "bench.mariadb_write:run",
    "jms_read": "bench.jms_read:run",
    "jms_read_tls": "bench.jms_read:run_tls",
    "jms_write": "bench.jms_write:run",
    "kafka_write": "bench.kafka_write:run",
    "kafka_tasks": "bench.kafka_tasks:run",
    "kafka_first_batch": "bench.kafka_first_batch:run",
    "window_sliding_1": "bench.windows:sliding_1",
    "window_sliding_12": "bench.windows:sliding_12",
    "window_sliding_60": "bench.windows:sliding_60",
    "window_session": "bench.windows:session",
    "peer_kafka_eo": "bench.peer_kafka:run",
    "peer_latency_eo": "bench.peer_latency:run",
    "routing_write": "bench.routing_write:run",
}

# curve case -> "module:function" returning a bench.scaling.curves.Curve.
CURVES: dict[str, str] = {
    "scale_commit": "bench.scaling.commit:run",
    "scale_partitions": "bench.scaling.partitions:run",
    "scale_record_size": "bench.scaling.records:run",
    "scale_windows": "bench.scaling.windows:run",
}


def _curve(name: str) -> bool:
    """Run one curve case and save it; whether its outputs were what their inputs said."""
    from bench.scaling import curves

    module, fn = CURVES[name].split(":")
    curve: curves.Curve = getattr(importlib.import_module(module), fn)()
    print(f"curve: {curves.save(curve, RESULTS)}", file=sys.stderr)
    if not curve.complete:
        print(f"{name}: some points were not measured (see its notes)", file=sys.stderr)
    return curve.equal


def _run(name: str) -> Result:
    module, fn = CASES[name].split(":")
    run: Callable[[], Result] = getattr(importlib.import_module(module), fn)
    return run()


def _charts() -> None:
    """Charts of every case's latest result; a missing matplotlib (make bench installs it)
    costs the charts, never the figures already printed and written."""
    from bench import chart

    try:
        written = chart.write_charts(chart.load(RESULTS), RESULTS, "latest results")
    except ImportError as e:
        print(f"no charts: {e} (pip install -e '.[docs]')", file=sys.stderr)
        return
    for path in written:
        print(f"chart: {path}", file=sys.stderr)


def main(argv: list[str]) -> int:
    names = argv or sorted(CASES)
    if "scale" in names:
        names = [n for n in names if n != "scale"] + sorted(CURVES)
    names = list(dict.fromkeys(names))  # each once, in the order given
    # scale_commit sets the Python workers' environment before the JVM starts: first.
    names.sort(key=lambda n: n != "scale_commit")
    unknown = [n for n in names if n not in CASES and n not in CURVES]
    if unknown:
        print(f"unknown bench case(s) {unknown}; available: {sorted(CASES)}, curves (or 'scale'): "
              f"{sorted(CURVES)}", file=sys.stderr)
        return 2
    if not names:
        print("no bench cases are built yet")
        return 0
    RESULTS.mkdir(exist_ok=True)
    scratch = local_scratch.claim("bench")  # Spark's spark-*/blockmgr-* dirs, removed below
    try:
        return _cases(names)
    finally:
        local_scratch.release(scratch)


def _cases(names: list[str]) -> int:
    unequal = []
    for name in names:
        if name in CURVES:
            if not _curve(name):
                unequal.append(name)
            continue
        r = _run(name)
        print(r.line(), flush=True)
        (RESULTS / f"{name}.json").write_text(json.dumps(r.doc(), indent=2))
        if not r.equal:
            unequal.append(name)
    if any(n in CASES for n in names):
        _charts()
    if unequal:  # a speed figure over different output means nothing
        print(f"output differs from the baseline in: {', '.join(unequal)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
