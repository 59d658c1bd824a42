"""Several sinks, one decision: ``hzsink`` connector ``routing``.

One query writes each row to the sub-sink its route column names (a PostgreSQL table, a
Kafka topic, a queue, each configured as it would be alone). Every sub-sink prepares its
share of a task as it does alone; the batch is decided once, in one system (the
*decider*: a ``jdbc`` sub-sink's database), and then every sub-sink commits its winners.

- ``config``: options -> the sub-sinks' specs (names, columns, derived ids);
- ``writer``: executor side, one task's rows split by route (step 3);
- ``committer``: driver side, the sub-sinks' primitives composed (steps 1, 4, 5);
- the decision and the ``DecisionLog`` a decider offers are the core's: ``spark_ext.decisions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import StructType

from spark_ext import compat, registry
from spark_ext.commit import Claim, Committer, TwoPhaseCommitter
from spark_ext.connector import SinkConnector
from spark_ext.decisions import decision_log
from spark_ext.errors import ConfigurationError, SparkExtError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from spark_ext.routing.committer import RoutingCommitter
from spark_ext.routing.config import ROUTING_OPTIONS, RoutingSpec, SubSinkSpec, parse
from spark_ext.routing.writer import RoutingFence, RoutingWriter

__all__ = ["RoutingSink"]


@dataclass(frozen=True)
class SubSink:
    """A sub-sink's spec and its connector's config (picklable, as any sink config)."""

    spec: SubSinkSpec
    config: Any


@dataclass(frozen=True)
class RoutingConfig:
    spec: RoutingSpec
    guarantee: Guarantee
    subs: tuple[SubSink, ...]
    decider: str | None  # the sub-sink whose system holds the decisions (exactly_once)


def _connector(name: str) -> SinkConnector[Any]:
    conn = registry.load(registry.SINKS, name, "hzsink")()  # type: ignore[operator]
    assert isinstance(conn, SinkConnector)
    return conn


def _named(name: str, e: SparkExtError) -> SparkExtError:
    """The same error, naming the sub-sink it is about."""
    try:
        return type(e)(f"sub-sink {name!r}: {e}")
    except TypeError:
        return e


def _listed(names: list[str]) -> str:
    return f" ({', '.join(names)})" if names else ""


class RoutingSink(SinkConnector[RoutingConfig]):
    """``df.writeStream.format("hzsink").option("connector", "routing")``."""

    name = "routing"
    option_spec = ROUTING_OPTIONS

    def configure(self, options: Options, schema: StructType, guarantee: Guarantee) -> RoutingConfig:
        spec = parse(options, schema, guarantee.transactional)
        spark_keys = {k: v for k, v in options.raw().items()
                      if k in (compat.CHECKPOINT_OPTION, "queryname")}
        subs: list[SubSink] = []
        targets: dict[str, str] = {}
        for s in spec.subs:
            try:
                conn = _connector(s.connector)
                own = {**dict(s.options), **spark_keys, "connector": s.connector,
                       "guarantee": guarantee.value}
                sub_id = spec.sub_id(s.name)
                if sub_id is not None:
                    own[conn.id_option.lower()] = sub_id
                sub_opts = Options(own, "hzsink")
                conn.check(sub_opts, guarantee)
                cfg = conn.configure(sub_opts, spec.input_schema(s, schema), guarantee)
            except SparkExtError as e:
                raise _named(s.name, e) from None
            target = conn.target(cfg)
            if target is not None and target in targets:
                raise ConfigurationError(
                    f"sub-sinks {targets[target]!r} and {s.name!r} both write {target}; give each sub-sink "
                    "its own table, topic or queue (or route both kinds of rows to one sub-sink)")
            if target is not None:
                targets[target] = s.name
            subs.append(SubSink(s, cfg))
        decider = self._decider(spec, subs) if guarantee.transactional else None
        if spec.dead_letters is not None:
            kept = next(s for s in subs if s.spec.name == spec.dead_letters[0])
            why = _connector(kept.spec.connector).sets_aside(kept.config)
            if why is not None:
                raise ConfigurationError(f"deadLetter: {why}")
        return RoutingConfig(spec, guarantee, tuple(subs), decider)

    @staticmethod
    def _decider(spec: RoutingSpec, subs: list[SubSink]) -> str:
        assert spec.routing_id is not None  # exactly_once parsing required one
        able = [s.spec.name for s in subs
                if decision_log(_connector(s.spec.connector), s.config, spec.routing_id) is not None]
        if spec.decider is not None:
            if spec.decider not in able:
                raise ConfigurationError(
                    f"option 'decider' names sub-sink {spec.decider!r}, whose connector cannot hold the "
                    f"routing sink's decisions; name a jdbc sub-sink{_listed(able)}")
            return spec.decider
        if not able and spec.dead_letters is not None:
            raise ConfigurationError(
                "dead letters under guarantee exactly_once are decided with the good rows in PostgreSQL, and "
                "neither the sink nor its dead-letter destination is a PostgreSQL table (MariaDB and MySQL, "
                "Kafka and queue sinks cannot hold the decisions yet): write the dead letters to PostgreSQL "
                "(deadLetter.connector 'jdbc', deadLetter.url postgresql://...), or use guarantee "
                "at_least_once")
        if spec.dead_letters is not None and spec.dead_letters[0] in able:
            return spec.dead_letters[0]  # the sink's own database, as without dead letters
        if not able:
            raise ConfigurationError(
                "hzsink connector 'routing' with guarantee exactly_once keeps its one decision per batch in "
                "PostgreSQL: add a jdbc sub-sink (its database holds the decisions; Kafka and queue sinks "
                "cannot hold them yet), or use guarantee at_least_once")
        return able[0]

    def validate(self, config: RoutingConfig, schema: StructType) -> RoutingConfig:
        subs = []
        for s in config.subs:
            try:
                given = config.spec.input_schema(s.spec, schema)
                valid = _connector(s.spec.connector).validate(s.config, given)
                subs.append(SubSink(s.spec, valid))
            except SparkExtError as e:
                raise _named(s.spec.name, e) from None
        return RoutingConfig(config.spec, config.guarantee, tuple(subs), config.decider)

    def new_writer(self, config: RoutingConfig, claim: Claim[Any] | None) -> RoutingWriter:
        fence = claim.fence if claim is not None else None
        assert fence is None or isinstance(fence, RoutingFence)
        writers = {s.spec.name: _connector(s.spec.connector).new_writer(
            s.config, fence.claim(s.spec.name) if fence is not None else None) for s in config.subs}
        return RoutingWriter(config.spec.route_column, {s.spec.name: s.spec.columns for s in config.subs},
                             writers, claim, config.spec.dead_letters, config.spec.routing_id or "")

    def new_committer(self, config: RoutingConfig) -> Committer[Any]:
        subs: dict[str, TwoPhaseCommitter[Any, Any]] = {}
        for s in config.subs:
            committer = _connector(s.spec.connector).new_committer(s.config)
            assert isinstance(committer, TwoPhaseCommitter), s.spec.connector
            subs[s.spec.name] = committer
        assert config.decider is not None and config.spec.routing_id is not None
        decider = next(s for s in config.subs if s.spec.name == config.decider)
        log = decision_log(_connector(decider.spec.connector), decider.config, config.spec.routing_id)
        assert log is not None
        return RoutingCommitter(config.spec.routing_id, subs, log, config.spec.dead_letters, config.spec.cap)
