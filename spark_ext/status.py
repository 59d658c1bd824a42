"""``spark-ext status <connector> ...``: what each sink has decided, as a table or JSON.

Each connector's doctor module reads its sinks' state with the reads its ``list``
command makes and returns ``SinkStatus`` rows; this module parses the common flags and
renders the rows, so every connector shows the same columns under the same JSON keys::

    spark-ext status jdbc  --url postgresql+psycopg2://user@host/db [--json]
    spark-ext status kafka --bootstrap HOST:9092 --prefix PREFIX --topic TOPIC [--json]
    spark-ext status jms   --broker stomp://HOST:61613 --sink-id ID [--json]

The JSON document (``--json``) is ``{"connector": ..., "sinks": [...]}``; each sink has
exactly the keys in ``JSON_KEYS``, null where the connector does not know the value.

``spark-ext status kafka --bootstrap HOST:9092 --checkpoint DIR`` also shows a query's
Kafka source lag: the end offsets of the last batch the checkpoint records as committed,
against the broker's latest, per partition (a ``lag`` table; JSON key ``lag``, each row
the keys in ``LAG_KEYS``). It reads the checkpoint's files, so it works with the query
stopped or crashed, when the lag matters most.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from spark_ext.errors import SparkExtError

#: The keys of one source partition's lag in ``--json`` output (key ``lag``), in order.
LAG_KEYS = ("source", "topic", "partition", "end", "latest", "lag")

#: The keys of one sink in ``--json`` output, in order; scripts may rely on them.
JSON_KEYS = ("sink", "target", "batch", "query", "finished", "in_doubt", "epoch", "in_doubt_ids",
             "dead_letters")


@dataclass(frozen=True)
class SinkStatus:
    """One sink as its external system records it.

    ``sink``: the sink id (PostgreSQL, queue) or transactional id prefix (Kafka).
    ``target``: the table, topic or queue it writes. ``batch`` / ``query``: the last batch
    decided to commit and its Spark query id (None: nothing decided yet). ``finished``:
    whether every winner of that decision committed (None without a decision).
    ``in_doubt``: transactions prepared or open and not committed, named in
    ``in_doubt_ids``. ``epoch``: the fencing epoch, one higher for every run and batch
    plan that took the sink over (older runs are fenced). ``dead_letters``: refused rows
    the last decided batch set aside (None: the sink has no dead-letter destination).
    """

    sink: str
    target: str | None
    batch: int | None
    query: str | None
    finished: bool | None
    in_doubt: int
    epoch: int | None
    in_doubt_ids: tuple[str, ...] = ()
    dead_letters: int | None = None

    def as_dict(self) -> dict[str, object]:
        values = {"sink": self.sink, "target": self.target, "batch": self.batch, "query": self.query,
                  "finished": self.finished, "in_doubt": self.in_doubt, "epoch": self.epoch,
                  "in_doubt_ids": list(self.in_doubt_ids), "dead_letters": self.dead_letters}
        return {k: values[k] for k in JSON_KEYS}


@dataclass(frozen=True)
class SourceLag:
    """One partition of a query's source: ``end``, the last committed batch's end offset;
    ``latest``, the broker's latest (last stable) offset; ``source``, the source's place in
    the query (0 for the first)."""

    source: int
    topic: str
    partition: int
    end: int
    latest: int

    @property
    def lag(self) -> int:
        return max(self.latest - self.end, 0)

    def as_dict(self) -> dict[str, object]:
        return {"source": self.source, "topic": self.topic, "partition": self.partition, "end": self.end,
                "latest": self.latest, "lag": self.lag}


def kafka_offsets(doc: Any) -> dict[tuple[str, int], int] | None:
    """A source's offsets as ``{(topic, partition): offset}`` if they have the shape Spark's
    Kafka source and ours write (``{"topic": {"0": 42}}``), None for any other source's.
    Here, not under the Kafka connector: the exporter uses it without the Kafka extra."""
    if not isinstance(doc, dict) or not doc:
        return None
    out = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict) or not all(str(p).isdigit() and type(o) is int
                                                  for p, o in parts.items()):
            return None
        out.update({(str(topic), int(p)): o for p, o in parts.items()})
    return out


def committed_offsets(checkpoint: str) -> tuple[int, list[Any]] | None:
    """The last batch a query's checkpoint records as committed (``commits/<n>``) and each
    source's end offsets of it (``offsets/<n>``: parsed JSON, None for a source without);
    None before the first committed batch, and for a directory not there (yet: a sidecar
    may start before its query). A local directory (or ``file:`` URI)."""
    root = Path(checkpoint.removeprefix("file://").removeprefix("file:"))
    if not root.exists():
        return None
    if not root.is_dir():
        raise SparkExtError(f"checkpoint {checkpoint} is not a directory: give the query's "
                            "checkpointLocation (a local path; copy a remote one here first)")
    done = sorted(int(p.name) for p in (root / "commits").glob("*") if p.name.isdigit())
    if not done:
        return None
    lines = (root / "offsets" / str(done[-1])).read_text().splitlines()
    sources = []
    for line in lines[2:]:  # "v1", the batch's metadata, then one line per source
        try:
            sources.append(json.loads(line))
        except ValueError:
            sources.append(None)  # "-": a source with no offset yet
    return done[-1], sources


def to_json(connector: str, rows: Sequence[SinkStatus], lag: Sequence[SourceLag] | None = None) -> str:
    doc: dict[str, object] = {"connector": connector, "sinks": [r.as_dict() for r in rows]}
    if lag is not None:
        doc["lag"] = [r.as_dict() for r in lag]
    return json.dumps(doc, indent=2)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def table(connector: str, rows: Sequence[SinkStatus]) -> Table:
    """The rows as a ``rich`` table; on a narrow terminal long ids fold rather than being cut off."""
    t = Table(title=f"spark-ext status {connector}", title_justify="left")
    t.add_column("sink", overflow="fold")
    t.add_column("table/topic", overflow="fold")
    t.add_column("last batch", justify="right")
    t.add_column("query", overflow="fold")
    t.add_column("finished")
    t.add_column("in doubt", justify="right")
    t.add_column("epoch", justify="right")
    dead = any(r.dead_letters is not None for r in rows)
    if dead:
        t.add_column("dead letters", justify="right")
    for r in rows:
        finished = "-" if r.finished is None else "yes" if r.finished else "[bold red]no[/]"
        doubt = f"[bold yellow]{r.in_doubt}[/]" if r.in_doubt else "0"
        cells = [r.sink, _cell(r.target), _cell(r.batch), _cell(r.query), finished, doubt, _cell(r.epoch)]
        if dead:
            cells.append(f"[bold yellow]{r.dead_letters}[/]" if r.dead_letters else _cell(r.dead_letters))
        t.add_row(*cells)
    return t


def lag_table(rows: Sequence[SourceLag]) -> Table:
    t = Table(title="source lag (last committed batch)", title_justify="left")
    for name in ("source", "topic", "partition", "end", "latest", "lag"):
        t.add_column(name, justify="left" if name == "topic" else "right", overflow="fold")
    for r in rows:
        lag = f"[bold yellow]{r.lag}[/]" if r.lag else "0"
        t.add_row(str(r.source), r.topic, str(r.partition), str(r.end), str(r.latest), lag)
    return t


def render(connector: str, rows: Sequence[SinkStatus], as_json: bool, out: TextIO | None = None,
           lag: Sequence[SourceLag] | None = None) -> None:
    """``lag``: a source's lag rows (None: not asked; then no rows says no sinks were found)."""
    out = out or sys.stdout
    if as_json:
        print(to_json(connector, rows, lag), file=out)
        return
    console = Console(file=out)
    tables = []
    if rows:
        tables.append(table(connector, rows))
    elif lag is None:
        console.print(f"no {connector} sinks found", markup=False)
    if lag:
        tables.append(lag_table(lag))
    elif lag is not None:
        console.print("no lag to show: the checkpoint has no committed batch (or is not there yet), or its "
                      "query reads no Kafka topic", markup=False)
    for t in tables:
        if not console.is_terminal:  # a pipe or file: whole ids on one line, not folded to 80 columns
            wide = console.options.update_width(1000)
            console.width = max(console.width, Measurement.get(console, wide, t).maximum)
        console.print(t)


def run(connector: str, argv: Sequence[str], description: str,
        add_arguments: Callable[[argparse.ArgumentParser], None],
        collect: Callable[[argparse.Namespace], list[SinkStatus]],
        lag: Callable[[argparse.Namespace], list[SourceLag] | None] | None = None,
        check: Callable[[argparse.Namespace], None] | None = None) -> int:
    """Parse ``argv`` (the doctor's connection arguments and ``--json``), collect, print.
    ``lag``: a connector's source lag (None when the arguments ask for none); ``check``:
    refuses a combination of arguments (``SparkExtError``), before anything is read.

    Errors print one line, never a traceback: a driver's traceback can carry the URL.
    """
    ap = argparse.ArgumentParser(prog=f"spark-ext status {connector}", description=description)
    ap.add_argument("--json", action="store_true", help="print JSON (stable keys) instead of a table")
    ap.add_argument("--serve", type=int, metavar="PORT",
                    help="serve the rows as Prometheus metrics on PORT (0: any free port), read at every "
                         "scrape")
    ap.add_argument("--addr", default="127.0.0.1", help="with --serve: the address to listen on")
    add_arguments(ap)
    args = ap.parse_args(list(argv))
    try:
        if check is not None:
            check(args)
    except SparkExtError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.serve is not None:
        from spark_ext.monitoring.sidecar import serve_status  # --json: no meaning for metrics

        return serve_status(connector, lambda: collect(args), args.serve, args.addr,
                            (lambda: lag(args)) if lag is not None else None)
    try:
        rows = collect(args)
        lags = lag(args) if lag is not None else None
    except (SparkExtError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - a CLI: report in one line, no traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"error: {type(e).__name__}: {first}", file=sys.stderr)
        return 1
    render(connector, rows, args.json, lag=lags)
    return 0
