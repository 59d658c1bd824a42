"""What a connector implements to plug into ``hzsource`` / ``hzsink``.

Connectors register under the ``connector`` option's name (``spark_ext.registry``) and
are called on the driver at query start; nothing here connects before that.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from functools import partial
from typing import Any, ClassVar, Generic, TypeVar

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from spark_ext import deadletters, timeline
from spark_ext.commit import Claim, Committer, NoOpCommitter, SinkWriter, TwoPhaseCommitter
from spark_ext.errors import ConfigurationError, UnsupportedGuaranteeError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options, OptionSpec
from spark_ext.stream import SinkPlan
from spark_ext.timeline import PlanTimes

ConfigT = TypeVar("ConfigT")


class SourceConnector(ABC):
    """A source: its options, its output schema and its readers. Driver side."""

    name: ClassVar[str]
    option_spec: ClassVar[OptionSpec] = OptionSpec(frozenset())

    def check(self, options: Options) -> None:
        """Reject unknown and missing options. Driver, at ``load()``."""
        self.option_spec.check(options.raw(), f"hzsource connector {self.name!r}")

    @abstractmethod
    def schema(self, options: Options) -> StructType:
        """The output schema. Driver, at ``load()``; raising fails ``load()``."""

    @abstractmethod
    def stream_reader(self, options: Options, schema: StructType) -> DataSourceStreamReader:
        """The micro-batch reader. Driver, at query start; pickled to executors for ``read``."""

    def reader(self, options: Options, schema: StructType) -> DataSourceReader:
        """A batch reader (``spark.read``); by default not offered."""
        raise ConfigurationError(
            f"hzsource connector {self.name!r} reads streams only: use spark.readStream"
        )


class SinkConnector(ABC, Generic[ConfigT]):
    """A sink: its options, the guarantees it can give, and how its plan is built. Driver side.

    ``plan`` is the template of step 1 of the protocol (``spark_ext.commit``); a
    connector fills in ``configure``, ``validate``, ``new_writer`` and ``new_committer``.
    """

    name: ClassVar[str]
    option_spec: ClassVar[OptionSpec] = OptionSpec(frozenset())
    guarantees: ClassVar[frozenset[Guarantee]] = frozenset(Guarantee)
    default_guarantee: ClassVar[Guarantee] = Guarantee.EXACTLY_ONCE

    #: The option naming the sink's stable id (a routing sink sets it for its sub-sinks).
    id_option: ClassVar[str] = "sinkId"

    def check(self, options: Options, guarantee: Guarantee) -> None:
        """Reject unknown and missing options and unsupported guarantees. Driver, at start."""
        self.option_spec.check(options.raw(), f"hzsink connector {self.name!r}")
        if guarantee not in self.guarantees:
            ok = ", ".join(sorted(g.value for g in self.guarantees))
            raise UnsupportedGuaranteeError(
                f"hzsink connector {self.name!r} cannot give guarantee {guarantee.value!r}; "
                f"it supports {ok}"
            )

    @abstractmethod
    def configure(self, options: Options, schema: StructType, guarantee: Guarantee) -> ConfigT:
        """Options and input schema -> the sink's frozen, picklable config. Pure: no I/O.

        Driver, in both kinds of plan; raising fails the query before anything is written.
        """

    def validate(self, config: ConfigT, schema: StructType) -> ConfigT:
        """Check ``config`` against the external system (tables, topics, limits); return
        the config the batch runs with (it may add what only that system knows).

        Driver, before each batch (``prepare=True`` only); raising stops the query
        before any row of the batch is written. Default: nothing to check.
        """
        return config

    def target(self, config: ConfigT) -> str | None:
        """What the sink writes, as one string (system and table, topic or queue): two
        sinks of one query naming the same would write over each other. None: not known."""
        return None

    def sets_aside(self, config: ConfigT) -> str | None:
        """Why this sink's writers cannot set refused rows aside as dead letters (None:
        they can, being ``spark_ext.deadletters.SetsAside``). Driver, at start."""
        return (f"connector {self.name!r} cannot set refused rows aside yet; only 'jdbc', 'kafka' and "
                "'jms' can")

    @abstractmethod
    def new_writer(self, config: ConfigT, claim: Claim[Any] | None) -> SinkWriter[Any]:
        """The executor-side writer (step 3). ``claim`` is None without exactly-once."""

    @abstractmethod
    def new_committer(self, config: ConfigT) -> Committer[Any]:
        """The driver-side committer (steps 1, 4, 5), built from the config alone: a
        ``TwoPhaseCommitter`` for the transactional guarantees."""

    def plan(self, options: Options, schema: StructType, guarantee: Guarantee, *,
             prepare: bool = True) -> SinkPlan:
        """Step 1: the sink's plan. Driver, twice per micro-batch (in the planning worker,
        then in the commit worker; Spark reuses each process from batch to batch).

        ``prepare=True`` (before the batch's tasks): configure, validate, and for
        exactly-once take the sink over. ``prepare=False`` (to run the batch's
        ``commit`` / ``abort``): configure only, touching nothing, because the batch's
        transactions are prepared and waiting for that commit.
        """
        started_ms, t0 = timeline.now_ms(), time.monotonic()
        # A source's unreadable records are never written: writers set them aside or fail.
        if deadletters.is_corrupt_column(schema):
            schema = StructType([f for f in schema.fields if f.name != deadletters.CORRUPT])
        config = self.configure(options, schema, guarantee)
        t1 = t2 = t3 = time.monotonic()
        claim: Claim[Any] | None = None
        if prepare:
            config = self.validate(config, schema)
            t2 = t3 = time.monotonic()
            if guarantee.transactional:
                committer = self.new_committer(config)
                if not isinstance(committer, TwoPhaseCommitter):
                    raise TypeError(f"{type(self).__name__}: exactly_once needs a TwoPhaseCommitter")
                claim = committer.take_over()
                t3 = time.monotonic()
        times = PlanTimes(started_ms, (t1 - t0) * 1000, (t2 - t1) * 1000, (t3 - t2) * 1000)
        new_committer = partial(self.new_committer, config) if guarantee.transactional else NoOpCommitter
        return SinkPlan(guarantee, partial(self.new_writer, config, claim), new_committer, claim=claim,
                        times=times, label=f"{self.name} sink ({guarantee.value})")
