"""What the payments demo checks at the end: every payment once, every output once.

All counts come from the real systems: the input topic read back, the PostgreSQL tables,
the alerts topic read with ``read_committed``, the notices queue read to its end,
``pg_prepared_xacts``, the Kafka broker's list of open transactions and the queue sink's
staged messages. Expected windows are recomputed from the input with pandas.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from examples.payments.job import LATENESS_S, LEDGER, SIZE_S, SLIDE_S, WINDOWS
from spark_ext.options import SEPARATOR
from spark_ext.routing.config import routing_id

TOL = 1e-6  # frame sums add and subtract floats: compare to a micro-unit


@dataclass(frozen=True)
class Queue:
    """Where the notices go: a STOMP broker and a queue on it."""

    host: str
    port: int
    user: str
    password: str
    destination: str


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    ok: bool = True
    counts: dict[str, int] = field(default_factory=dict)  # duplicates, lost, in_doubt

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


def read_queue(q: Queue, timeout_s: float = 60.0) -> list[str]:
    """Every message on the queue (consumed), up to a marker sent now: the queue is first
    in, first out, so once the marker arrives nothing older is left."""
    import stomp

    marker = f"end-of-verification-{uuid.uuid4().hex}"
    conn = stomp.Connection12([(q.host, q.port)], heartbeats=(0, 0))
    conn.connect(q.user, q.password, wait=True)
    got: list[str] = []
    done = threading.Event()

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame: stomp.utils.Frame) -> None:
            if frame.body == marker:
                done.set()
            else:
                got.append(frame.body)

    try:
        conn.send(q.destination, marker, headers={"persistent": "true"})
        conn.set_listener("verify", Listener())
        conn.subscribe(q.destination, id="verify", ack="auto")
        if not done.wait(timeout_s):
            raise TimeoutError(f"the end of {q.destination} not reached in {timeout_s:.0f} s")
    finally:
        conn.disconnect(receipt=f"bye-{uuid.uuid4().hex}")  # every frame before it delivered
    return got


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
           checkpoint: str, notices: Queue, consumed: Sequence[str] = ()) -> Report:
    """Compare the job's outputs with its input; one report line per item. ``consumed``:
    payment ids of notices a reader already took off the queue while the job ran."""
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

    left = [json.loads(b)["payment_id"] for b in read_queue(notices)]
    noticed = pd.Series([*consumed, *left], dtype=object)
    dup_notices = int(noticed.duplicated().sum())
    lost_notices, extra_notices = len(ids - set(noticed)), len(set(noticed) - ids)

    duplicates = dup_windows + dup_alerts + dup_notices
    rep.add(f"duplicates: {duplicates} (window rows {dup_windows}, alerts {dup_alerts}, notices "
            f"{dup_notices}; the ledger is upserted by payment id)", duplicates == 0)
    lost_all = lost + missing + missing_alerts + lost_notices
    rep.add(f"lost: {lost_all} (payments {lost}, closed windows {missing}, alerts {missing_alerts}, "
            f"notices {lost_notices})", lost_all == 0)
    rep.add(f"notices: {len(noticed)} (for payments not in the input: {extra_notices})", extra_notices == 0)
    rid = routing_id(checkpoint)
    prepared = _prepared(url, rid)
    open_txns = _open_kafka_transactions(bootstrap, alerts_topic, f"{rid}{SEPARATOR}alerts")
    staged = staged_messages(notices, f"{rid}{SEPARATOR}notices")
    in_doubt = prepared + open_txns + staged
    rep.counts.update(duplicates=duplicates, lost=lost_all, in_doubt=in_doubt)
    rep.add(f"in doubt: {in_doubt} (prepared PostgreSQL transactions {prepared}, open Kafka "
            f"transactions {open_txns}, staged queue messages {staged})", in_doubt == 0)
    rep.add(f"windows written: {len(wins)} (equal to a batch computation: {len(wins) - wrong}, different: "
            f"{wrong}; {len(exp) - len(written & set(zip(exp['account'], exp['window_start'], strict=True)))}"
            " still open behind the watermark)", wrong == 0)
    rep.add(f"alerts: {len(got)} (windows over {limit:g}: {len(want)}, not in the windows: {extra_alerts})",
            extra_alerts == 0)
    return rep


def _prepared(url: str, rid: str) -> int:
    """Prepared PostgreSQL transactions of the routing sink's two jdbc sub-sinks."""
    from spark_ext.connectors.jdbc.doctor import list_in_doubt

    return sum(len(list_in_doubt(url, "public", f"{rid}{SEPARATOR}{name}")) for name in ("ledger", "windows"))


def _open_kafka_transactions(bootstrap: str, topic: str, prefix: str) -> int:
    from spark_ext.connectors.kafka.doctor import open_transactions
    from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
    from spark_ext.guarantees import Guarantee
    from spark_ext.options import Options

    cfg = KafkaSinkConfig.parse(Options({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                                         "transactionalIdPrefix": prefix}, "payments demo"),
                                Guarantee.EXACTLY_ONCE)
    return len(open_transactions(cfg))


def staged_messages(q: Queue, sink_id: str) -> int:
    """Messages the queue sub-sink staged and never moved to the queue (nor dropped)."""
    from spark_ext.connectors.jms.doctor import sink_state
    from spark_ext.connectors.jms.sink.config import JmsSinkConfig
    from spark_ext.guarantees import Guarantee
    from spark_ext.options import Options

    cfg = JmsSinkConfig.parse(Options({"host": q.host, "port": str(q.port), "user": q.user,
                                       "password": q.password, "destination": q.destination,
                                       "sinkId": sink_id}, "payments demo"), Guarantee.EXACTLY_ONCE)
    return sum(sink_state(cfg)[1].values())
