"""``spark-ext doctor <connector> ...`` and ``spark-ext status <connector> ...``: the
commands every connector's operator tool shares, filled in by the connector.

A connector's doctor module subclasses ``Doctor`` and supplies its primitives: the
connection arguments (``arguments``), how to list what its sinks left in doubt
(``show``), how to resolve it (``resolve``) and its sinks' ``SinkStatus`` rows
(``rows``; a source's ``lag`` too, where it has one). ``Doctor`` parses the arguments,
runs the action, turns errors into one line and sets the exit code; its bound ``main``
and ``status`` are the module's ``main`` and ``status``, which the ``spark_ext.doctors``
registry group names (``spark_ext.cli``)::

    spark-ext doctor jdbc  list    --url postgresql+psycopg2://user@host/db
    spark-ext doctor kafka resolve --bootstrap HOST:9092 --prefix PREFIX --topic TOPIC
    spark-ext status jms   --broker stomp://HOST:61613 --sink-id ID [--json]

``status`` prints the rows as a table or, with ``--json``, as the document
``spark_ext.status.rows`` describes; with ``--serve PORT`` it serves them as Prometheus
metrics instead, read at every scrape (``spark_ext.monitoring.sidecar``). Exit codes: 0
done, 1 an error (printed as one line, never a traceback: a driver's traceback can carry
a URL with its password), 2 arguments argparse refused.
"""

from __future__ import annotations

import argparse
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Literal

from spark_ext.errors import SparkExtError
from spark_ext.monitoring.sidecar import serve_status
from spark_ext.status.rows import SinkStatus, SourceLag, render

#: What a connector's ``arguments`` is asked to add arguments for.
Command = Literal["list", "resolve", "status"]


class Doctor(ABC):
    """One connector's ``doctor`` (``list`` / ``resolve``) and ``status`` commands.

    ``connector``: the name after ``doctor`` / ``status``; ``summary`` and
    ``status_summary``: the two commands' ``--help`` descriptions; ``watches``: whether
    ``resolve`` takes ``--watch SECONDS`` (see ``refuse_while_running``).
    """

    connector: str
    summary: str
    status_summary: str
    watches: bool = False

    @abstractmethod
    def arguments(self, p: argparse.ArgumentParser, command: Command) -> None:
        """Add the connection arguments ``command`` takes to ``p``."""

    @abstractmethod
    def show(self, args: argparse.Namespace) -> None:
        """``list``: print what the sink (or every sink the arguments name) left in doubt."""

    @abstractmethod
    def resolve(self, args: argparse.Namespace) -> None:
        """``resolve``: finish what the sink's last decision names, drop the rest, print
        what was done; ``SparkExtError`` to refuse (e.g. its query is running)."""

    @abstractmethod
    def rows(self, args: argparse.Namespace) -> list[SinkStatus]:
        """``status``: one row per sink the arguments name."""

    def lag(self, args: argparse.Namespace) -> list[SourceLag] | None:
        """``status``: a query's source lag per partition (None: the arguments ask for none)."""
        return None

    def check(self, args: argparse.Namespace) -> None:  # noqa: B027 - a hook: most refuse nothing
        """``status``: refuse a combination of arguments (``SparkExtError``) before anything is read."""

    def main(self, argv: Sequence[str] | None = None) -> int:
        """``spark-ext doctor <connector> <list|resolve> ...`` (``argv`` starts after the connector)."""
        ap = argparse.ArgumentParser(prog=f"spark-ext doctor {self.connector}", description=self.summary)
        sub = ap.add_subparsers(dest="action", required=True)
        actions: tuple[Command, ...] = ("list", "resolve")
        for name in actions:
            p = sub.add_parser(name)
            self.arguments(p, name)
            if name == "resolve" and self.watches:
                p.add_argument("--watch", type=float, default=5.0,
                               help="seconds to watch for a running query first (default 5)")
        args = ap.parse_args(None if argv is None else list(argv))
        try:
            (self.show if args.action == "list" else self.resolve)(args)
        except Exception as e:  # noqa: BLE001 - a CLI: one line, never a traceback
            return _report(e)
        return 0

    def status(self, argv: Sequence[str]) -> int:
        """``spark-ext status <connector> ...``: parse the connection arguments, ``--json`` and
        ``--serve``, read the rows (and lag), print them."""
        ap = argparse.ArgumentParser(prog=f"spark-ext status {self.connector}",
                                     description=self.status_summary)
        ap.add_argument("--json", action="store_true", help="print JSON (stable keys) instead of a table")
        ap.add_argument("--serve", type=int, metavar="PORT",
                        help="serve the rows as Prometheus metrics on PORT (0: any free port), read at every "
                             "scrape")
        ap.add_argument("--addr", default="127.0.0.1", help="with --serve: the address to listen on")
        self.arguments(ap, "status")
        args = ap.parse_args(list(argv))
        try:
            self.check(args)
        except SparkExtError as e:
            return _report(e)
        if args.serve is not None:  # --json: no meaning for metrics
            return serve_status(self.connector, lambda: self.rows(args), args.serve, args.addr,
                                lambda: self.lag(args))
        try:
            rows, lag = self.rows(args), self.lag(args)
        except Exception as e:  # noqa: BLE001 - a CLI: one line, never a traceback
            return _report(e)
        render(self.connector, rows, args.json, lag=lag)
        return 0


def _report(e: Exception) -> int:
    """An error as one line on stderr (an unexpected one: its type and first line); 1."""
    if isinstance(e, (SparkExtError, OSError)):
        print(f"error: {e}", file=sys.stderr)
    else:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"error: {type(e).__name__}: {first}", file=sys.stderr)
    return 1


def refuse_while_running(read: Callable[[], object], seconds: float, moved: str, own: str) -> None:
    """``resolve --watch``: ``read()`` now and after ``seconds``; a change means the sink's
    query is running, and ``SparkExtError`` says so. ``moved``: what ``read`` shows (the
    sink's transactions, its log); ``own``: what a running query resolves itself."""
    before = read()
    time.sleep(seconds)
    if read() != before:
        raise SparkExtError(f"the sink's {moved} changed while watching: its query is running; stop it first "
                            f"(a running query resolves its own {own})")


def decision_state(item: str, batch: int, decided: Mapping[int, Collection[str]]) -> str:
    """``list``'s state of an in-doubt item of ``batch``, given the decided batches' winners:
    ``undecided``, ``decided: commit`` (a winner) or ``decided: not a winner``."""
    return ("undecided" if batch not in decided
            else "decided: commit" if item in decided[batch] else "decided: not a winner")


def decision_rows(sinks: Mapping[str, tuple[str, int]], decided: Mapping[str, tuple[str, int, set[str]]],
                  in_doubt: Iterable[tuple[str, str]], finished: Mapping[str, bool] | None = None,
                  dead_letters: Mapping[str, int | None] | None = None) -> list[SinkStatus]:
    """``status`` rows of sinks that keep a decision log, by sink id: every sink named in
    ``sinks`` (its target and fencing epoch), ``decided`` (its newest decision: query id,
    batch id, the winners' ids) or ``in_doubt`` (sink id and in-doubt id pairs, in
    ``list``'s order). A decided batch finished when none of its winners is in doubt,
    unless ``finished`` says otherwise for that sink."""
    doubt: dict[str, list[str]] = {}
    for sink, item in in_doubt:
        doubt.setdefault(sink, []).append(item)
    out = []
    for s in sorted(set(sinks) | set(doubt) | set(decided)):
        target, epoch = sinks.get(s, (None, None))
        query, batch, winners = decided.get(s, (None, None, set()))
        ids = doubt.get(s, [])
        done = (finished or {}).get(s, not winners & set(ids))
        out.append(SinkStatus(sink=s, target=target, batch=batch, query=query,
                              finished=None if batch is None else done, in_doubt=len(ids), epoch=epoch,
                              in_doubt_ids=tuple(ids), dead_letters=(dead_letters or {}).get(s)))
    return out
