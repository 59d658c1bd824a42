"""The rows ``spark-ext status <connector>`` shows, and their table and JSON forms.

Each connector's doctor reads its sinks' state and returns ``SinkStatus`` rows (and, for
a query's source, ``SourceLag`` rows); this module renders them, so every connector
shows the same columns under the same JSON keys. The JSON document (``--json``) is
``{"connector": ..., "sinks": [...]}``; each sink has exactly the keys in ``JSON_KEYS``,
null where the connector does not know the value. With a source's lag asked for, the
document also has key ``lag``: one entry per partition, with the keys in ``LAG_KEYS``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

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
