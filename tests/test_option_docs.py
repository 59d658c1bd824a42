"""The reference's option tables come from the connectors' OptionSpecs: every option a
connector accepts has a description, and every connector has a table in the docs."""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from spark_ext import registry
from spark_ext.options import Option, OptionSpec
from spark_ext.windows import api as windows_api

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _connectors() -> list[tuple[str, str, Any]]:
    found = []
    for kind, group in (("source", registry.SOURCES), ("sink", registry.SINKS)):
        for name in sorted(registry.available(group)):
            found.append((kind, name, registry.load(group, name, "test")))
    return found


CONNECTORS = _connectors()


@pytest.mark.parametrize(("kind", "name", "connector"), CONNECTORS,
                         ids=[f"{k}-{n}" for k, n, _ in CONNECTORS])
def test_every_option_has_a_description(kind: str, name: str, connector: Any) -> None:
    spec = connector.option_spec
    assert spec.documented, f"{kind} {name}: its OptionSpec documents nothing (build it with OptionSpec.of)"
    assert spec.undocumented() == [], f"{kind} {name}: options without a description"


def test_windows_arguments_have_descriptions_and_the_signatures_defaults() -> None:
    spec = windows_api.ARGUMENTS
    assert spec.undocumented() == []
    for p in inspect.signature(windows_api.sliding).parameters.values():
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        documented = spec.option(p.name)  # KeyError: a keyword argument the reference lacks
        assert documented.default == p.default, p.name


@pytest.mark.parametrize(("kind", "name", "connector"), [c for c in CONNECTORS if c[0] == "sink"],
                         ids=[n for k, n, _ in CONNECTORS if k == "sink"])
def test_a_sinks_documented_guarantee_is_its_default(kind: str, name: str, connector: Any) -> None:
    assert connector.option_spec.default("guarantee") == connector.default_guarantee.value


def test_every_connector_has_a_table_in_the_docs() -> None:
    markers = {m.groups() for page in DOCS.rglob("*.md") for m in _hooks().MARKER.finditer(page.read_text())}
    for kind, name, _ in CONNECTORS:
        assert (kind, name) in markers, f"no page has <!-- options: {kind} {name} -->"
    assert ("windows", "") in markers


def test_a_marker_becomes_the_table() -> None:
    out = _hooks().render("# Kafka sink\n\n<!-- options: sink kafka -->\n")
    assert "<!--" not in out
    assert "| `transactionalIdPrefix` | derived from `checkpointLocation` |" in out
    assert re.search(r"^\| `kafka.transaction.timeout.ms` \| `900000` \|", out, re.M)


def test_an_option_without_a_description_fails_the_table() -> None:
    hooks = _hooks()
    spec = OptionSpec.of(Option("topic", "The topic."), Option("commitTopic", " "))
    with pytest.raises(hooks.OptionTableError, match="committopic"):
        hooks.table(spec, "test")
    bare = OptionSpec(frozenset({"topic"}), prefixes=("kafka.",))
    assert bare.undocumented() == ["topic", "kafka.*"]


def test_an_unknown_marker_fails() -> None:
    with pytest.raises(Exception, match="unknown connector"):
        _hooks().render("<!-- options: sink nosuch -->")
