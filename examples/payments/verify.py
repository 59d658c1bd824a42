"""What the payments demo checks at the end: every payment once, every output once.

All counts come from the real systems: the input topic read back, the PostgreSQL tables,
the alerts topic read with ``read_committed``, ``pg_prepared_xacts`` and the broker's list
of open transactions. Expected windows are recomputed from the input with pandas.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pandas as pd

from examples.payments.job import LATENESS_S, LEDGER, SIZE_S, SLIDE_S, WINDOWS

TOL = 1e-6  # frame sums add and subtract floats: compare to a micro-unit


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    ok: bool = True

    def add(self, line: str, good: bool = True) -> None:
        self.lines.append(line)
        self.ok = self.ok and good


def read_topic(bootstrap: str, topic: str, *, committed_only: bool) -> list[tuple[int, bytes]]:
    """Every record of ``topic`` as (partition, value), up to its end offsets now."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             isolation_level="read_committed" if committed_only else "read_uncommitted")
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)  # last stable offsets under read_committed
        out: list[tuple[int, bytes]] = []
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for tp, records in consumer.poll(timeout_ms=1000).items():
                out.extend((tp.partition, r.value) for r in records if r.offset < ends[tp])
        return out
    finally:
        consumer.close()


def expected_windows(payments: pd.DataFrame) -> pd.DataFrame:
    """Per account, every non-empty 30 s window sliding by 10 s, as a batch computes it."""
    slide = pd.Timedelta(seconds=SLIDE_S)
    first = payments["event_time"].dt.floor(f"{SLIDE_S}s")
    parts = [payments.assign(window_start=first - k * slide) for k in range(SIZE_S // SLIDE_S)]
    out = pd.concat(parts).groupby(["account", "window_start"]).agg(
        n=("amount", "size"), total=("amount", "sum"), avg_amount=("amount", "mean"),
        max_amount=("amount", "max")).reset_index()
    out["window_end"] = out["window_start"] + pd.Timedelta(seconds=SIZE_S)
    return out


def _close(a: pd.Series, b: pd.Series) -> pd.Series:
    return (a - b).abs() <= TOL * b.abs().clip(lower=1.0)


def verify(bootstrap: str, topic: str, alerts_topic: str, url: str, limit: float,
           checkpoint: str) -> Report:
    """Compare the job's outputs with its input; one report line per item."""
    import sqlalchemy as sa

    rep = Report()
    events = [(p, json.loads(v)) for p, v in read_topic(bootstrap, topic, committed_only=False)]
    inp = pd.DataFrame([{**e, "partition": p} for p, e in events])
    inp["event_time"] = pd.to_datetime(inp["event_time"], utc=True)
    unique = inp.drop_duplicates("payment_id")
    rep.add(f"payments in: {len(unique)} ({len(inp)} events, {len(inp) - len(unique)} re-sent by the bank)")

    engine = sa.create_engine(url)
    with engine.connect() as conn:
        ledger = pd.read_sql(sa.text(f"SELECT payment_id, amount FROM {LEDGER}"), conn)
        wins = pd.read_sql(sa.text(f"SELECT * FROM {WINDOWS}"), conn)
    engine.dispose()
    ids = set(unique["payment_id"])
    lost = len(ids - set(ledger["payment_id"]))
    unknown = len(set(ledger["payment_id"]) - ids)
    rep.add(f"ledger rows: {len(ledger)}", unknown == 0)

    exp = expected_windows(unique)
    wins["window_start"] = pd.to_datetime(wins["window_start"], utc=True)
    dup_windows = len(wins) - len(wins.drop_duplicates(["account", "window_start"]))
    # The job emits a window once the coalesced watermark (per Kafka partition, the newest
    # event time, minus the lateness) passes its end; later windows are still open.
    bound = inp.groupby("partition")["event_time"].max().min() - pd.Timedelta(seconds=LATENESS_S)
    joined = wins.drop_duplicates(["account", "window_start"]).merge(
        exp, on=["account", "window_start"], how="left", suffixes=("", "_exp"), indicator=True)
    wrong = int((joined["_merge"] == "left_only").sum()) + int((~(
        (joined["n"] == joined["n_exp"]) & _close(joined["total"], joined["total_exp"])
        & _close(joined["avg_amount"], joined["avg_amount_exp"])
        & _close(joined["max_amount"], joined["max_amount_exp"])))[joined["_merge"] == "both"].sum())
    written = set(zip(wins["account"], wins["window_start"], strict=True))
    closed = exp[exp["window_end"] <= bound]
    missing = sum(1 for k in zip(closed["account"], closed["window_start"], strict=True) if k not in written)

    alert_rows = [json.loads(v) for _p, v in read_topic(bootstrap, alerts_topic, committed_only=True)]
    got = [(a["account"], pd.Timestamp(a["window_start"])) for a in alert_rows]
    want = {k for k, t in zip(zip(wins["account"], wins["window_start"], strict=True), wins["total"],
                              strict=True) if t > limit}
    dup_alerts = len(got) - len(set(got))
    missing_alerts, extra_alerts = len(want - set(got)), len(set(got) - want)

    duplicates = dup_windows + dup_alerts
    rep.add(f"duplicates: {duplicates} (window rows {dup_windows}, alerts {dup_alerts}; the ledger is "
            "upserted by payment id)", duplicates == 0)
    rep.add(f"lost: {lost + missing + missing_alerts} (payments {lost}, closed windows {missing}, "
            f"alerts {missing_alerts})", lost + missing + missing_alerts == 0)
    prepared = _prepared(url, checkpoint)
    open_txns = _open_kafka_transactions(bootstrap, alerts_topic, f"{checkpoint}/alerts")
    rep.add(f"in doubt: {prepared + open_txns} (prepared PostgreSQL transactions {prepared}, open Kafka "
            f"transactions {open_txns})", prepared + open_txns == 0)
    rep.add(f"windows written: {len(wins)} (equal to a batch computation: {len(wins) - wrong}, different: "
            f"{wrong}; {len(exp) - len(written & set(zip(exp['account'], exp['window_start'], strict=True)))}"
            " still open behind the watermark)", wrong == 0)
    rep.add(f"alerts: {len(got)} (windows over {limit:g}: {len(want)}, not in the windows: {extra_alerts})",
            extra_alerts == 0)
    return rep


def _prepared(url: str, checkpoint: str) -> int:
    """Prepared PostgreSQL transactions of the job's two jdbc sinks (ids from their checkpoints)."""
    from spark_ext.connectors.jdbc.doctor import list_in_doubt
    from spark_ext.options import checkpoint_sink_id

    return sum(len(list_in_doubt(url, "public", checkpoint_sink_id(f"{checkpoint}/{q}")))
               for q in ("ledger", "windows"))


def _open_kafka_transactions(bootstrap: str, topic: str, checkpoint: str) -> int:
    from spark_ext import compat
    from spark_ext.connectors.kafka.doctor import open_transactions
    from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
    from spark_ext.guarantees import Guarantee
    from spark_ext.options import Options

    cfg = KafkaSinkConfig.parse(Options({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                                         compat.CHECKPOINT_OPTION: checkpoint}, "payments demo"),
                                Guarantee.EXACTLY_ONCE)
    return len(open_transactions(cfg))


