"""``spark-ext status <connector> ...``: what each sink has decided, as a table or JSON.

Each connector's doctor module reads its sinks' state with the reads its ``list``
command makes and returns ``SinkStatus`` rows; this module parses the common flags and
renders the rows, so every connector shows the same columns under the same JSON keys::

    spark-ext status jdbc  --url postgresql+psycopg2://user@host/db [--json]
    spark-ext status kafka --bootstrap HOST:9092 --prefix PREFIX --topic TOPIC [--json]
    spark-ext status jms   --broker stomp://HOST:61613 --sink-id ID [--json]

The JSON document (``--json``) is ``{"connector": ..., "sinks": [...]}``; each sink has
exactly the keys in ``JSON_KEYS``, null where the connector does not know the value.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from spark_ext.errors import SparkExtError

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


def to_json(connector: str, rows: Sequence[SinkStatus]) -> str:
    return json.dumps({"connector": connector, "sinks": [r.as_dict() for r in rows]}, indent=2)


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


def render(connector: str, rows: Sequence[SinkStatus], as_json: bool, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    if as_json:
        print(to_json(connector, rows), file=out)
        return
    console = Console(file=out)
    if not rows:
        console.print(f"no {connector} sinks found", markup=False)
        return
    t = table(connector, rows)
    if not console.is_terminal:  # a pipe or file: whole ids on one line, not folded to 80 columns
        wide = console.options.update_width(1000)
        console.width = max(console.width, Measurement.get(console, wide, t).maximum)
    console.print(t)


def run(connector: str, argv: Sequence[str], description: str,
        add_arguments: Callable[[argparse.ArgumentParser], None],
        collect: Callable[[argparse.Namespace], list[SinkStatus]]) -> int:
    """Parse ``argv`` (the doctor's connection arguments and ``--json``), collect, print.

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
    if args.serve is not None:
        from spark_ext.monitoring.sidecar import serve_status  # --json: no meaning for metrics

        return serve_status(connector, lambda: collect(args), args.serve, args.addr)
    try:
        rows = collect(args)
    except (SparkExtError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - a CLI: report in one line, no traceback
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"error: {type(e).__name__}: {first}", file=sys.stderr)
        return 1
    render(connector, rows, args.json)
    return 0
