"""What a connector implements to plug into ``hzsource`` / ``hzsink``.

Connectors are looked up by the ``connector`` option (see ``connectors/__init__.py``)
and called on the driver at query start; nothing here connects before that.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from spark_ext.commit import SinkPlan
from spark_ext.errors import ConfigurationError, UnsupportedGuaranteeError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options, OptionSpec


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


class SinkConnector(ABC):
    """A sink: its options, the guarantees it can give, and its ``SinkPlan``. Driver side."""

    name: ClassVar[str]
    option_spec: ClassVar[OptionSpec] = OptionSpec(frozenset())
    guarantees: ClassVar[frozenset[Guarantee]] = frozenset(Guarantee)
    default_guarantee: ClassVar[Guarantee] = Guarantee.EXACTLY_ONCE

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
    def plan(self, options: Options, schema: StructType, guarantee: Guarantee, *,
             prepare: bool = True) -> SinkPlan:
        """The sink's plan. Driver, in a fresh Python worker, twice per micro-batch.

        ``prepare=True`` (before the batch's tasks): validate against the external system
        and resolve what earlier batches or runs left in doubt; raising stops the query
        before any row of the batch is written. ``prepare=False`` (to run the batch's
        ``commit`` / ``abort``): build the plan from the options alone, touching nothing,
        because the batch's transactions are prepared and waiting for that commit.
        """
