"""Operator tool for the Kafka sink: its open transactions and its recorded decisions.

A crashed query resolves its own transactions when it restarts. Use this when it cannot:
a decided batch whose transactions the broker aborted (the driver was down longer than
``kafka.transaction.timeout.ms``), or a query that will never restart::

    spark-ext doctor kafka list    --bootstrap HOST:9092 --prefix PREFIX --topic COMMIT_TOPIC
    spark-ext doctor kafka resolve --bootstrap HOST:9092 --prefix PREFIX --topic COMMIT_TOPIC
    spark-ext status kafka         --bootstrap HOST:9092 --prefix PREFIX --topic COMMIT_TOPIC [--json]
    spark-ext status kafka         --bootstrap HOST:9092 --checkpoint QUERY_CHECKPOINT   (source lag)

``PREFIX`` is the sink's ``transactionalIdPrefix`` (``spark-ext-<hash>`` when derived from
the checkpoint location: the query's error message names it), ``COMMIT_TOPIC`` its
``commitTopic`` (by default its ``topic``). ``resolve`` commits what the last decision
names, reports the transactions the broker had aborted (their records are lost: re-send
that input), marks the batch done and aborts every other open transaction of the sink.
It refuses while the query is running (its transactions or its commit id move during
``--watch`` seconds). On a secured cluster, pass the client settings the query uses, as
Kafka's own tools take them: ``--command-config FILE`` with Java properties lines
(``security.protocol=SASL_SSL``, ``sasl.mechanism=...``, ``sasl.jaas.config=...``,
``ssl.truststore.location=...``).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient, TxnState
from spark_ext.connectors.kafka.sink.committer import OPEN_STATES, Decision, KafkaCommitter
from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
from spark_ext.doctor import Command, Doctor, refuse_while_running
from spark_ext.errors import SparkExtError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from spark_ext.status import SinkStatus, SourceLag

_SUMMARY = (__doc__ or "").split("\n")[0]


def _properties(path: str | None) -> dict[str, str]:
    """``key=value`` lines of a Java properties file as ``kafka.*`` options (no escapes)."""
    if path is None:
        return {}
    out = {}
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            k, v = line.split("=", 1)
            out["kafka." + k.strip()] = v.strip()
    return out


def _config(a: argparse.Namespace) -> KafkaSinkConfig:
    """The sink's config from the connection arguments, as the query's options would give it."""
    opts = {**_properties(a.command_config),
            "kafka.bootstrap.servers": a.bootstrap, "transactionalidprefix": a.prefix, "topic": a.topic}
    return KafkaSinkConfig.parse(Options(opts, "spark-ext doctor kafka"), Guarantee.EXACTLY_ONCE)


def open_transactions(cfg: KafkaSinkConfig) -> list[TxnState]:
    """The sink's transactions that are still open, oldest first."""
    client = KafkaTxnClient(cfg.bootstrap, cfg.timeout_s, cfg.security)
    try:
        tids = [t for t, _pid, _state in client.list_transactions(cfg.txn_pattern, OPEN_STATES)]
        return sorted(client.describe(tids).values(), key=lambda s: s.start_ms)
    finally:
        client.close()


def _commit_state(cfg: KafkaSinkConfig) -> TxnState:
    """The sink's commit id: its producer epoch grows with every take-over (each run and batch plan)."""
    client = KafkaTxnClient(cfg.bootstrap, cfg.timeout_s, cfg.security)
    try:
        return client.describe([cfg.commit_txn_id])[cfg.commit_txn_id]
    finally:
        client.close()


def _snapshot(cfg: KafkaSinkConfig) -> set[tuple[str, int, int]]:
    commit = _commit_state(cfg)
    return {(s.transactional_id, s.epoch, s.start_ms) for s in open_transactions(cfg)} | {
        (commit.transactional_id, commit.epoch, commit.start_ms)}


@dataclass(frozen=True)
class KafkaSinkState:
    """What ``list`` and ``status`` show: the open transactions, the last decision and
    whether it finished, and the commit id's state (its epoch fences older runs)."""

    open: list[TxnState]
    decision: Decision | None
    done: bool
    commit: TxnState


def sink_state(cfg: KafkaSinkConfig) -> KafkaSinkState:
    txns = open_transactions(cfg)
    commit = _commit_state(cfg)
    decision, done = KafkaCommitter(cfg).last_decision()
    return KafkaSinkState(txns, decision, done, commit)


def sink_status(cfg: KafkaSinkConfig) -> SinkStatus:
    st = sink_state(cfg)
    d = st.decision
    return SinkStatus(sink=cfg.txn_prefix, target=cfg.commit_topic, batch=d.batch_id if d else None,
                      query=d.query_id if d else None, finished=st.done if d else None,
                      in_doubt=len(st.open), epoch=None if st.commit.state == "NotFound" else st.commit.epoch,
                      in_doubt_ids=tuple(t.transactional_id for t in st.open))


def _connection_arguments(p: argparse.ArgumentParser, sink_required: bool = True) -> None:
    p.add_argument("--bootstrap", required=True, help="kafka.bootstrap.servers")
    p.add_argument("--prefix", required=sink_required, help="the sink's transactionalIdPrefix")
    p.add_argument("--topic", required=sink_required, help="the sink's commitTopic (by default its topic)")
    p.add_argument("--command-config", help="a properties file of client security settings")


class KafkaDoctor(Doctor):
    """``list`` / ``resolve``: the sink of ``--prefix`` and ``--topic``; ``status``: that
    sink, one row, and with ``--checkpoint`` the query's source lag per partition."""

    connector = "kafka"
    summary = _SUMMARY
    status_summary = "The Kafka sink's last decision and open transactions; a query's Kafka source lag."
    watches = True

    def arguments(self, p: argparse.ArgumentParser, command: Command) -> None:
        _connection_arguments(p, sink_required=command != "status")
        if command == "status":
            p.add_argument("--checkpoint",
                           help="a query's checkpointLocation (local): show its Kafka source lag")

    def check(self, args: argparse.Namespace) -> None:
        if (args.prefix is None) != (args.topic is None):
            raise SparkExtError("give both --prefix and --topic for a sink (or neither, with --checkpoint)")
        if args.prefix is None and args.checkpoint is None:
            raise SparkExtError("give --prefix and --topic (a sink's state), --checkpoint (a query's source "
                                "lag), or both")

    def rows(self, args: argparse.Namespace) -> list[SinkStatus]:
        return [] if args.prefix is None else [sink_status(_config(args))]

    def lag(self, args: argparse.Namespace) -> list[SourceLag] | None:
        if args.checkpoint is None:
            return None
        from spark_ext.connectors.kafka.source.lag import checkpoint_lag

        return checkpoint_lag(args.bootstrap, args.checkpoint, _properties(args.command_config))

    def show(self, args: argparse.Namespace) -> None:
        cfg = _config(args)
        now = time.time() * 1000
        st = sink_state(cfg)
        for s in st.open:
            parts = ",".join(f"{t}-{p}" for t, p in s.partitions)
            print(f"open {s.transactional_id} state={s.state} producer={s.producer_id} epoch={s.epoch} "
                  f"age={(now - s.start_ms) / 1000:.0f}s partitions={parts or '-'}")
        decision = st.decision
        if decision is None:
            print("no decision recorded")
        else:
            print(f"decision batch={decision.batch_id} query={decision.query_id} done={st.done} "
                  f"winners={','.join(f'{w.transactional_id}@{w.epoch}' for w in decision.winners)}")
        print(f"commit {st.commit.transactional_id} state={st.commit.state} producer={st.commit.producer_id} "
              f"epoch={st.commit.epoch}")
        print(f"{len(st.open)} open transaction(s)")

    def resolve(self, args: argparse.Namespace) -> None:
        cfg = _config(args)
        # a running query starts transactions and re-fences its commit id
        refuse_while_running(lambda: _snapshot(cfg), args.watch, "transactions", "transactions")
        claim, decision, lost = KafkaCommitter(cfg).resolve()
        for w in lost:
            print(f"lost {w.transactional_id} (producer {w.producer_id}, epoch {w.epoch}) of batch "
                  f"{decision.batch_id if decision else '?'}: aborted by the broker; re-send its input")
        print(f"sink {cfg.txn_prefix}: {claim.committed} committed, {len(lost)} lost, "
              f"{claim.rolled_back} open transaction(s) aborted")


DOCTOR = KafkaDoctor()
main, status = DOCTOR.main, DOCTOR.status

if __name__ == "__main__":
    sys.exit(main())
