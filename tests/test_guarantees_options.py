"""Unit tests: guarantee parsing and option validation (no Spark, no services)."""

from __future__ import annotations

import pytest

from spark_ext.errors import (
    ConfigurationError,
    InvalidOptionError,
    MissingOptionError,
    UnknownGuaranteeError,
    UnknownOptionError,
)
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options, OptionSpec, redact


@pytest.mark.parametrize(
    ("text", "expected"),
    [("exactly_once", Guarantee.EXACTLY_ONCE), ("AT_LEAST_ONCE", Guarantee.AT_LEAST_ONCE),
     ("at-least-once", Guarantee.AT_LEAST_ONCE), (" none ", Guarantee.NONE)],
)
def test_guarantee_parses_each_spelling(text, expected):
    assert Guarantee.parse(text, Guarantee.NONE) is expected


def test_guarantee_defaults_when_unset():
    assert Guarantee.parse(None, Guarantee.EXACTLY_ONCE) is Guarantee.EXACTLY_ONCE
    assert Guarantee.parse("", Guarantee.AT_LEAST_ONCE) is Guarantee.AT_LEAST_ONCE


def test_unknown_guarantee_names_value_and_choices():
    with pytest.raises(UnknownGuaranteeError) as e:
        Guarantee.parse("exactly_twice", Guarantee.NONE)
    msg = str(e.value)
    assert "'exactly_twice'" in msg
    for choice in ("exactly_once", "at_least_once", "none"):
        assert choice in msg
    assert isinstance(e.value, ConfigurationError)


def test_only_exactly_once_is_transactional():
    assert [g for g in Guarantee if g.transactional] == [Guarantee.EXACTLY_ONCE]


SPEC = OptionSpec(frozenset({"topic", "maxoffsetspertrigger"}), prefixes=("kafka.",),
                  required=frozenset({"topic"}))


def test_unknown_option_is_named_with_a_suggestion():
    with pytest.raises(UnknownOptionError) as e:
        SPEC.check({"topic": "t", "maxoffsetpertrigger": "5"}, "test connector")
    msg = str(e.value)
    assert "'maxoffsetpertrigger'" in msg
    assert "did you mean 'maxoffsetspertrigger'" in msg
    assert "kafka." in msg


def test_prefixed_and_spark_options_pass():
    SPEC.check({"topic": "t", "kafka.acks": "all", "checkpointlocation": "/x", "queryname": "q",
                "connector": "kafka", "guarantee": "none"}, "test connector")


def test_missing_required_option_is_named():
    with pytest.raises(MissingOptionError, match="'topic'"):
        SPEC.check({}, "test connector")


def test_typed_getters_reject_bad_values_with_the_option_name():
    opts = Options({"maxOffsetsPerTrigger": "ten", "failOnDataLoss": "maybe", "n": "-1"}, "src")
    with pytest.raises(InvalidOptionError, match=r"'maxOffsetsPerTrigger'.*'ten'.*integer"):
        opts.get_int("maxOffsetsPerTrigger")
    with pytest.raises(InvalidOptionError, match=r"'failOnDataLoss'.*true or false"):
        opts.get_bool("failOnDataLoss", True)
    with pytest.raises(InvalidOptionError, match=">= 1"):
        opts.get_int("n", minimum=1)
    assert opts.get_int("absent", default=7) == 7


def test_secret_values_never_appear_in_errors_or_redacted_copies():
    opts = Options({"password": "hunter2"}, "sink")
    with pytest.raises(InvalidOptionError) as e:
        opts.get_int("password")
    assert "hunter2" not in str(e.value)
    assert redact({"password": "hunter2", "kafka.sasl.jaas.config": "x y", "url": "u"}) == {
        "password": "***", "kafka.sasl.jaas.config": "***", "url": "u"}


def test_prefix_passthrough_strips_the_prefix():
    opts = Options({"kafka.bootstrap.servers": "h:1", "kafka.acks": "all", "topic": "t"}, "s")
    assert opts.with_prefix("kafka.") == {"bootstrap.servers": "h:1", "acks": "all"}
