"""Operator tool for the queue sink: its last decision and what is left in staging.

A crashed query finishes its own batch and clears its staging queue when it restarts.
Use this when it will not restart::

    spark-ext doctor jms list    --broker stomp://HOST:61613 --user USER --checkpoint PATH
    spark-ext doctor jms resolve --broker stomp://HOST:61613 --user USER --checkpoint PATH \\
                                 --destination /queue/NAME
    spark-ext status jms   --broker stomp://HOST:61613 --user USER --checkpoint PATH [--json]

``--sink-id ID`` instead of ``--checkpoint`` when the query set option ``sinkId``. The
password comes from the environment variable ``SPARK_EXT_JMS_PASSWORD`` (never the
command line, where other users of the machine could read it). ``resolve`` moves the
winners of a decided, unfinished batch into the destination, marks it finished and
removes every other staged message; it takes the sink over (a newer epoch), so it refuses
while the sink's log moves during ``--watch`` seconds (its query is running).
"""

from __future__ import annotations

import argparse
import os
import sys

from spark_ext.connectors.jms.session import QueueMissingError
from spark_ext.connectors.jms.sink.committer import JmsCommitter, SinkState
from spark_ext.connectors.jms.sink.config import JmsSinkConfig
from spark_ext.doctor import Command, Doctor, refuse_while_running
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from spark_ext.status import SinkStatus

PASSWORD_ENV = "SPARK_EXT_JMS_PASSWORD"
_SUMMARY = (__doc__ or "").split("\n")[0]


def _config(args: argparse.Namespace) -> JmsSinkConfig:
    opts = {"brokerurl": args.broker, "destination": args.destination or "/queue/unknown"}
    if args.user:
        opts["user"] = args.user
    for name in ("tls_ca_file", "tls_cert_file", "tls_key_file"):  # stomp+ssl:// brokers
        if getattr(args, name, None):
            opts[name.replace("_", "")] = getattr(args, name)
    if os.environ.get(PASSWORD_ENV):
        opts["password"] = os.environ[PASSWORD_ENV]
    if args.sink_id:
        opts["sinkid"] = args.sink_id
    else:
        opts["checkpointlocation"] = args.checkpoint
    return JmsSinkConfig.parse(Options(opts, "spark-ext doctor jms"), Guarantee.EXACTLY_ONCE)


def staged(committer: JmsCommitter) -> dict[str, int]:
    """Messages in the sink's staging queue, per attempt token."""
    try:
        return committer.staged()
    except QueueMissingError:  # no staging queue: the sink never ran exactly-once here
        return {}


def _state(committer: JmsCommitter) -> SinkState | None:
    try:
        return committer.state()
    except QueueMissingError:
        return None


def sink_state(cfg: JmsSinkConfig) -> tuple[SinkState | None, dict[str, int]]:
    """What ``list`` and ``status`` show: the log's last entry (None: no log on this
    broker) and the staged messages per attempt token."""
    committer = JmsCommitter(cfg)
    try:
        return _state(committer), staged(committer)
    finally:
        committer.close()


def sink_status(cfg: JmsSinkConfig, destination: str | None) -> SinkStatus:
    state, left = sink_state(cfg)
    d = state.decision if state else None
    return SinkStatus(sink=cfg.sink_id, target=destination, batch=d.batch_id if d else None,
                      query=d.query_id if d else None, finished=state.done if state and d else None,
                      in_doubt=len(left), epoch=state.epoch if state else None,
                      in_doubt_ids=tuple(sorted(left)))


def _connection_arguments(p: argparse.ArgumentParser, destination_required: bool = False) -> None:
    p.add_argument("--broker", required=True,
                   help="stomp://host:port of the broker's STOMP acceptor (stomp+ssl:// for TLS)")
    p.add_argument("--tls-ca-file", help="with stomp+ssl://: the CA that signed the broker's certificate")
    p.add_argument("--tls-cert-file", help="with stomp+ssl://: a client certificate, if the broker wants one")
    p.add_argument("--tls-key-file", help="with stomp+ssl://: the client certificate's key")
    p.add_argument("--user", help=f"the broker user (password: ${PASSWORD_ENV})")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", help="the query's checkpoint location")
    which.add_argument("--sink-id", help="the query's sinkId option")
    p.add_argument("--destination", required=destination_required,
                   help="the sink's destination, /queue/NAME")


class JmsDoctor(Doctor):
    """``list``, ``resolve`` and ``status``: the sink of ``--sink-id`` or ``--checkpoint``
    (``status``: one row)."""

    connector = "jms"
    summary = _SUMMARY
    status_summary = "The queue sink's last decision and staged attempts."
    watches = True

    def arguments(self, p: argparse.ArgumentParser, command: Command) -> None:
        _connection_arguments(p, destination_required=command == "resolve")

    def rows(self, args: argparse.Namespace) -> list[SinkStatus]:
        return [sink_status(_config(args), args.destination)]

    def show(self, args: argparse.Namespace) -> None:
        cfg = _config(args)
        state, left = sink_state(cfg)
        if state is None:
            print(f"sink {cfg.sink_id}: no log (never ran exactly-once on this broker)")
        else:
            d = state.decision
            print(f"sink {cfg.sink_id}: epoch={state.epoch} entry={state.seq}")
            if d is None:
                print("no decision recorded")
            else:
                print(f"decision batch={d.batch_id} query={d.query_id} done={state.done} "
                      f"winners={','.join(f'{w.token}:{w.rows}' for w in d.winners)}")
        for token, n in sorted(left.items()):
            print(f"staged {token} messages={n}")
        print(f"{sum(left.values())} staged message(s) in {cfg.staging}")

    def resolve(self, args: argparse.Namespace) -> None:
        cfg = _config(args)
        committer = JmsCommitter(cfg)
        try:  # a running query appends to the log every batch
            refuse_while_running(lambda: _state(committer), args.watch, "log", "batches")
        finally:
            committer.close()
        claim = JmsCommitter(cfg).take_over()
        print(f"sink {cfg.sink_id}: {claim.committed} attempt(s) moved into {cfg.queue}, "
              f"{claim.rolled_back} staged message(s) removed; epoch {claim.fence}")


DOCTOR = JmsDoctor()
main, status = DOCTOR.main, DOCTOR.status

if __name__ == "__main__":
    sys.exit(main())
