"""The routing sink's options: named sub-sinks, each configured as it would be alone.

    .option("connector", "routing")
    .option("routeColumn", "sink")                 # which sub-sink a row goes to
    .option("sinks.ledger.connector", "jdbc")      # then every option of that connector
    .option("sinks.ledger.columns", "id,amount")   # the columns it gets (default: all but the route)
    .option("sinks.ledger.url", ...)

Driver only, pure: no connections. Each sub-sink's id (``sinkId``, or the Kafka sink's
``transactionalIdPrefix``) is derived from the routing sink's: ``<routing id>--<name>``, so
sub-sinks of one query know each other (``spark_ext.options.is_sibling``) and never clash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark.sql.types import StructType

from spark_ext.deadletters import CAP_OPTIONS, Cap
from spark_ext.errors import InvalidOptionError, MissingOptionError
from spark_ext.options import SEPARATOR, Option, Options, OptionSpec, checkpoint_sink_id, stable_sink_id

_NAME = re.compile(r"^[a-z0-9_]{1,40}$")
_SUB = re.compile(r"^sinks\.([^.]+)\.(.+)$")

ROUTING_OPTIONS = OptionSpec.of(
    Option("guarantee", "Every sub-sink's: `exactly_once` decides each batch once for all of them (every "
           "sub-sink must support it, and one must be a `jdbc` sink to hold the decisions); `at_least_once` "
           "and `none`: each sub-sink writes as it does alone.", default="exactly_once"),
    Option("routeColumn", "A string column naming each row's sub-sink; a row naming none of them fails "
           "its batch, naming the value.", default="sink"),
    Option("sinkId", "Stable name of the routing sink (1-64 letters, digits, `_`, `-`, `.`); the sub-sinks' "
           "ids are derived from it. `exactly_once` needs it or a `checkpointLocation`.",
           shown="derived from `checkpointLocation`"),
    Option("decider", "The sub-sink whose system holds the routing decisions (a `jdbc` sub-sink).",
           shown="the first `jdbc` sub-sink by name"),
    Option("deadLetters", "Set by a sink's `deadLetter.*` options (`<target>:<dead>`): every row goes to "
           "sub-sink `target`, and the rows it refuses for a reason of their own to sub-sink `dead`.",
           shown="none"),
    Option("maxDeadLetters", "With dead letters: at most this many refused rows a batch; beyond it the "
           "batch fails, naming the count and the first error, and nothing of it is committed.",
           shown="no limit"),
    Option("maxDeadLetterRatio", "With dead letters: at most this fraction (0 to 1) of a batch's rows "
           "refused; beyond it the batch fails as with `maxDeadLetters`.", shown="no limit"),
    Option("sinks.*", "`sinks.<name>.connector` names a sub-sink's connector; `sinks.<name>.columns` the "
           "columns it receives (comma-separated; default every column but the route column); every "
           "other `sinks.<name>.<option>` is that connector's own option."),
    prefixes=("sinks.",),
)


@dataclass(frozen=True)
class SubSinkSpec:
    """One named sub-sink: its connector, its own options, the columns it receives."""

    name: str
    connector: str
    options: tuple[tuple[str, str], ...]
    columns: tuple[str, ...]

    def schema(self, full: StructType) -> StructType:
        return StructType([full[c] for c in self.columns])


@dataclass(frozen=True)
class RoutingSpec:
    routing_id: str | None
    route_column: str | None  # None: dead letters, every row to the target
    decider: str | None
    subs: tuple[SubSinkSpec, ...]
    dead_letters: tuple[str, str] | None = None  # (target, dead)
    cap: Cap | None = None  # with dead letters: how many a batch may set aside

    def input_schema(self, sub: SubSinkSpec, full: StructType) -> StructType:
        """What sub-sink ``sub`` receives: its columns of the DataFrame, or of the dead letters."""
        if self.dead_letters is not None and sub.name == self.dead_letters[1]:
            from spark_ext import deadletters

            return sub.schema(deadletters.schema())
        return sub.schema(full)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.subs)

    def sub_id(self, name: str) -> str | None:
        return f"{self.routing_id}{SEPARATOR}{name}" if self.routing_id else None


def routing_id(checkpoint_location: str) -> str:
    """The id of a routing sink without ``sinkId``, from its query's checkpoint location
    (its sub-sinks' ids are ``<this>--<name>``)."""
    return "rt-" + checkpoint_sink_id(checkpoint_location).removeprefix("ck-")


def parse(opts: Options, schema: StructType, exactly_once: bool) -> RoutingSpec:
    ROUTING_OPTIONS.check(opts.raw(), "hzsink connector 'routing'")
    dead = _dead_letters(opts)
    route: str | None = None
    if dead is None:
        route = opts.get_str("routecolumn", ROUTING_OPTIONS.default_str("routeColumn"))
        assert route is not None
        if route not in schema.names:
            raise InvalidOptionError(f"routeColumn {route!r} is not a column of the DataFrame (columns: "
                                     f"{', '.join(schema.names)}); add it, or set option routeColumn")
    grouped: dict[str, dict[str, str]] = {}
    for key, value in opts.raw().items():
        m = _SUB.match(key)
        if key.startswith("sinks.") and not m:
            raise InvalidOptionError(f"option {key!r}: sub-sink options are spelled sinks.<name>.<option>")
        if m:
            grouped.setdefault(m.group(1), {})[m.group(2)] = value
    if not grouped:
        raise MissingOptionError("hzsink connector 'routing' needs at least one sub-sink: .option("
                                 "'sinks.<name>.connector', 'jdbc' | 'kafka' | 'jms') and its options")
    rid = stable_sink_id(opts, "routing", exactly_once, "(the sub-sinks' ids derive from it)")
    if rid is not None and opts.get_str("sinkid") is None:
        rid = routing_id(opts.checkpoint() or "")
    subs = []
    for name in sorted(grouped):
        own = dict(grouped[name])
        if not _NAME.match(name):
            raise InvalidOptionError(f"sub-sink name {name!r}: use 1-40 lower-case letters, digits or '_'")
        connector = own.pop("connector", None)
        if not connector:
            raise MissingOptionError(f"sub-sink {name!r} needs option 'sinks.{name}.connector'")
        if connector.strip().lower() == "routing":
            raise InvalidOptionError(f"sub-sink {name!r}: a routing sink cannot hold another routing sink")
        if any(k.startswith("deadletter.") for k in own):
            raise InvalidOptionError(
                f"sub-sink {name!r}: dead letters are not set per sub-sink; route the rows yourself to a "
                "sub-sink of their own (a route column value), or give the sink its own query")
        for taken in ("guarantee", "sinkid", "transactionalidprefix", "checkpointlocation"):
            if taken in own:
                raise InvalidOptionError(
                    f"option 'sinks.{name}.{taken}': set it on the routing sink itself (every sub-sink "
                    "writes under the routing sink's guarantee, and its id derives from the routing sink's)")
        cols_text = own.pop("columns", None)
        given = schema
        if dead is not None and name == dead[1]:
            from spark_ext import deadletters

            given = deadletters.schema()
        cols = tuple(c.strip() for c in cols_text.split(",") if c.strip()) if cols_text else \
            tuple(c for c in given.names if c != route)
        missing = [c for c in cols if c not in given.names]
        if missing or not cols:
            named = ", ".join(missing) or "no column"
            raise InvalidOptionError(f"option 'sinks.{name}.columns' names {named}, "
                                     f"not among the columns it can get: {', '.join(given.names)}")
        subs.append(SubSinkSpec(name, connector.strip().lower(), tuple(sorted(own.items())), cols))
    decider = opts.get_str("decider")
    if decider is not None and decider.lower() not in grouped:
        raise InvalidOptionError(f"option 'decider' is {decider!r}, not a sub-sink: "
                                 f"{', '.join(sorted(grouped))}")
    if rid is not None and len(rid) + len(SEPARATOR) + max(len(s.name) for s in subs) > 64:
        raise InvalidOptionError(f"sinkId {rid!r} with sub-sink names makes ids over 64 characters; use a "
                                 "shorter sinkId or shorter names")
    if dead is not None and set(dead) != set(grouped):
        raise InvalidOptionError(f"option deadLetters names sub-sinks {dead}, the routing sink has "
                                 f"{', '.join(sorted(grouped))}")
    cap = _cap(opts)
    if cap is not None and not exactly_once:
        which = "maxDeadLetters" if cap.most is not None else "maxDeadLetterRatio"
        raise InvalidOptionError(f"option {which} is checked when a batch is decided, so it needs "
                                 "guarantee exactly_once (with at_least_once each task commits its own rows)")
    return RoutingSpec(rid, route, decider.lower() if decider else None, tuple(subs), dead, cap)


def _cap(opts: Options) -> Cap | None:
    most = opts.get_int("maxdeadletters", None, minimum=0)
    text = opts.get_str("maxdeadletterratio")
    ratio = None
    if text is not None:
        try:
            ratio = float(text)
        except ValueError:
            ratio = -1.0
        if not 0 <= ratio <= 1:
            raise InvalidOptionError(f"option maxDeadLetterRatio is {text!r}; expected a fraction of a "
                                     "batch's rows from 0 to 1, e.g. 0.01 for one in a hundred")
    return Cap(most, ratio) if most is not None or ratio is not None else None


def _dead_letters(opts: Options) -> tuple[str, str] | None:
    text = opts.get_str("deadletters")
    if text is None:
        for cap in CAP_OPTIONS:
            if opts.get_str(cap.lower()) is not None:
                raise InvalidOptionError(f"option {cap} needs a dead-letter destination: "
                                         "deadLetter.connector and its options")
        return None
    target, _, dead = text.partition(":")
    if not target or not dead:
        raise InvalidOptionError(f"option deadLetters is {text!r}; expected '<target>:<dead>'")
    return target, dead


