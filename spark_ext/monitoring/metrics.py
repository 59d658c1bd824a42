"""Every metric the exporter serves: name, type, labels and meaning, declared once.

The exporter builds its families from these declarations and the docs page's table is
generated from them (``docs/hooks.py``, marker ``metrics``), so the page lists exactly
what a scrape shows. Names are stable: a renamed or dropped metric breaks dashboards.
"""

from __future__ import annotations

from dataclasses import dataclass

QUERY = ("query", "query_id")  # the query's name ("" without one) and its id (stable across restarts)


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str  # "gauge" or "counter"
    labels: tuple[str, ...]
    help: str


METRICS: tuple[Metric, ...] = (
    Metric("spark_ext_query_active", "gauge", QUERY,
           "1 while the query runs, 0 once it stopped or failed (kept until the exporter stops)"),
    Metric("spark_ext_query_failed", "gauge", QUERY, "1 when the query stopped with an exception"),
    Metric("spark_ext_query_batch_id", "gauge", QUERY, "The last batch the query reported progress for"),
    Metric("spark_ext_query_input_rows", "gauge", QUERY, "Rows the last batch read"),
    Metric("spark_ext_query_input_rows_per_second", "gauge", QUERY,
           "Rows arriving per second over the last trigger (Spark's inputRowsPerSecond)"),
    Metric("spark_ext_query_processed_rows_per_second", "gauge", QUERY,
           "Rows processed per second in the last batch (Spark's processedRowsPerSecond)"),
    Metric("spark_ext_query_duration_ms", "gauge", (*QUERY, "phase"),
           "The last batch's time per phase (Spark's durationMs: addBatch, latestOffset, walCommit, "
           "commitOffsets, queryPlanning, triggerExecution, ...)"),
    Metric("spark_ext_query_watermark_seconds", "gauge", QUERY,
           "The event-time watermark, epoch seconds (absent without one)"),
    Metric("spark_ext_query_state_rows", "gauge", QUERY, "Rows held in state, all stateful operators"),
    Metric("spark_ext_query_late_rows", "gauge", QUERY,
           "Rows the last batch dropped as later than the watermark, all stateful operators"),
    Metric("spark_ext_query_seconds_since_progress", "gauge", QUERY,
           "Seconds since the query last reported progress (a batch, or an idle trigger)"),
    Metric("spark_ext_source_lag_records", "gauge", (*QUERY, "source", "topic", "partition"),
           "Kafka source: the broker's latest offset minus the last batch's end offset, per partition "
           "(the latest as the source last asked, at the batch's planning)"),
    Metric("spark_ext_source_lag_records_max", "gauge", (*QUERY, "source"),
           "Kafka source: the largest lag of any partition"),
    Metric("spark_ext_queue_in_flight", "gauge", ("broker", "queue"),
           "Queue source: messages received and not yet acknowledged (held, or in a batch not yet "
           "committed), as of the source's last plan"),
    Metric("spark_ext_queue_depth", "gauge", ("broker", "queue"),
           "Queue source: the broker's message count of the queue, in flight included (asked every 5 s; "
           "absent without the manage permission)"),
    Metric("spark_ext_sink_last_batch", "gauge", (*QUERY, "sink"),
           "The last batch the sink committed (exactly_once: decided and finished)"),
    Metric("spark_ext_sink_rows_total", "counter", (*QUERY, "sink"),
           "Rows the sink committed in this query (counted on this host since an exporter first served "
           "it; a batch a restart's take-over finished is not counted)"),
    Metric("spark_ext_sink_transactions", "gauge", (*QUERY, "sink"),
           "Transactions the last batch committed (0 without exactly_once)"),
    Metric("spark_ext_sink_decide_ms", "gauge", (*QUERY, "sink"),
           "The last batch's commit start to its recorded decision, checks included"),
    Metric("spark_ext_sink_commit_ms", "gauge", (*QUERY, "sink"),
           "The last batch's decision to the end of its commit"),
    Metric("spark_ext_sink_batch_ms", "gauge", (*QUERY, "sink"),
           "The last batch's plan start to its commit's end, on the driver's clock"),
    Metric("spark_ext_sink_dead_letters", "gauge", (*QUERY, "sink"),
           "Rows the last batch set aside as dead letters (only for a sink with a destination)"),
    Metric("spark_ext_sink_seconds_since_commit", "gauge", (*QUERY, "sink"),
           "Seconds since the sink last committed a batch"),
    Metric("spark_ext_sink_retries_total", "counter", (*QUERY, "sink"),
           "Commit attempts retried after a retriable error (a database or broker away and back), "
           "counted as the sink's rows are"),
    Metric("spark_ext_sink_recovered_total", "counter", (*QUERY, "sink"),
           "In-doubt transactions a take-over found and resolved (committed if decided, else rolled "
           "back) before a committed batch: rises after a crash or a failed batch, counted as the rows are"),
    Metric("spark_ext_sink_takeover_transactions_total", "counter", (*QUERY, "sink", "action"),
           "What take-overs did with the in-doubt transactions they found, by action: committed (a batch "
           "decided before a crash or a failed commit, finished now) or rolled_back (never decided); counted "
           "as the rows are"),
    Metric("spark_ext_sink_epoch", "gauge", (*QUERY, "sink"),
           "The fencing epoch the last committed batch wrote under (exactly_once)"),
)

# Served by ``spark-ext status <connector> ... --serve PORT`` (``sidecar``), a process of its
# own that reads the external system at every scrape, so a crashed driver's sinks show.
STATUS = ("connector", "sink", "target")
STATUS_METRICS = (
    Metric("spark_ext_status_up", "gauge", ("connector",),
           "1 when the last scrape could read the sinks' state, 0 when it could not (the system is away)"),
    Metric("spark_ext_status_last_batch", "gauge", STATUS, "The newest batch the sink recorded as decided"),
    Metric("spark_ext_status_finished", "gauge", STATUS,
           "1 when every winner of that decision committed, 0 while it is decided and not finished (a crash "
           "mid-commit: the query's restart finishes it)"),
    Metric("spark_ext_status_in_doubt", "gauge", STATUS,
           "Transactions prepared or open and not committed (PostgreSQL prepared transactions, open Kafka "
           "transactions, staged queue attempts)"),
    Metric("spark_ext_status_epoch", "gauge", STATUS,
           "The fencing epoch: one higher for every take-over (each batch plan, each restart)"),
    Metric("spark_ext_status_dead_letters", "gauge", STATUS,
           "Dead letters of the last decided batch (routing sinks with a dead-letter destination)"),
    Metric("spark_ext_status_lag_records", "gauge", ("connector", "source", "topic", "partition"),
           "Kafka source (status kafka --checkpoint): the broker's latest offset minus the end offset of the "
           "last batch the query's checkpoint records as committed; grows while the query is down"),
)
METRICS = METRICS + STATUS_METRICS

BY_NAME = {m.name: m for m in METRICS}


def jvm_table() -> str:
    """The driver's metrics as the JVM exporter (``dev.sparkext.monitoring``, in the companion
    jar) reads them from its resources: one line each, name, kind, labels and help apart by tabs;
    the first line the metrics card's format version it reads. A unit test holds the jar's copy
    equal to this, so both exporters serve one declaration."""
    from spark_ext import formats

    lines = [f"# card format version\t{formats.METRICS_CARD.current}"]
    lines += [f"{m.name}\t{m.kind}\t{','.join(m.labels)}\t{m.help}" for m in METRICS
              if not m.name.startswith("spark_ext_status_")]
    return "\n".join(lines) + "\n"
