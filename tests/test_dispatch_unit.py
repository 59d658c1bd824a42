"""Sink dispatch logic without Spark: option checks run before the connector plans."""

from __future__ import annotations

from typing import ClassVar

import pytest
from pyspark.sql.types import StructType

import connectors
from spark_ext.commit import NoOpCommitter, ProtocolStreamWriter, SinkPlan
from spark_ext.connector import SinkConnector
from spark_ext.datasource import HzSink
from spark_ext.errors import UnknownOptionError, UnsupportedGuaranteeError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options, OptionSpec
from tests.fakes import NullWriter


class EchoSink(SinkConnector):
    name = "echo"
    option_spec = OptionSpec(frozenset({"topic"}), prefixes=("kafka.",))
    guarantees: ClassVar[frozenset[Guarantee]] = frozenset({Guarantee.AT_LEAST_ONCE, Guarantee.NONE})
    default_guarantee = Guarantee.AT_LEAST_ONCE

    def plan(self, options: Options, schema: StructType, guarantee: Guarantee, *,
             prepare: bool = True) -> SinkPlan:
        return SinkPlan(guarantee, new_writer=NullWriter, new_committer=NoOpCommitter)


@pytest.fixture
def echo(monkeypatch):
    monkeypatch.setitem(connectors.SINKS, "echo", "tests.test_dispatch_unit:EchoSink")


def test_sink_returns_protocol_writer_with_the_default_guarantee(echo):
    w = HzSink({"connector": "Echo", "topic": "t"}).streamWriter(StructType(), False)
    assert isinstance(w, ProtocolStreamWriter)
    assert w.plan.guarantee is Guarantee.AT_LEAST_ONCE


def test_sink_rejects_unknown_option(echo):
    with pytest.raises(UnknownOptionError, match=r"'topc'.*did you mean 'topic'"):
        HzSink({"connector": "echo", "topc": "t"}).streamWriter(StructType(), False)


def test_sink_rejects_guarantee_it_cannot_give(echo):
    with pytest.raises(UnsupportedGuaranteeError,
                       match=r"cannot give guarantee 'exactly_once'.*at_least_once, none"):
        HzSink({"connector": "echo", "guarantee": "exactly_once"}).streamWriter(StructType(), False)
