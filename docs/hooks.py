"""MkDocs hook: the reference's option tables, generated from the code at build time.

A page writes ``<!-- options: sink jdbc -->`` (or ``source kafka``, ``windows``, ``formats``) where
its table goes (``<!-- metrics -->``: the metrics the exporter serves; ``<!-- kafka-parity -->``:
the Kafka source's options against Spark's own);
``on_page_markdown`` replaces the marker with the options the connector's ``OptionSpec``
documents (name, default, description), in the order they are declared. The connector's
parser reads its defaults from the same declarations, so the table shows what the code
does. An unknown marker, or an option without a description, fails the build.
"""

from __future__ import annotations

import re
from typing import Any

from spark_ext import registry
from spark_ext.options import OptionSpec

MARKER = re.compile(r"<!--\s*options:\s*(source|sink|windows|formats)\s*([a-z0-9_]*)\s*-->")
KINDS = {"source": registry.SOURCES, "sink": registry.SINKS}


class OptionTableError(Exception):
    """A marker names nothing, or names options the code does not describe."""


def spec_for(kind: str, name: str) -> OptionSpec:
    """The ``OptionSpec`` a marker names: a registered connector's, the windows' arguments, or
    the key and value formats' options (part of the Kafka source's)."""
    if kind == "formats":  # ``formats``: the source's; ``formats sink``: the Kafka sink's
        from spark_ext.schemas.columns import FORMAT_OPTIONS
        from spark_ext.schemas.sink_options import SINK_FORMAT_OPTIONS

        return OptionSpec.of(*(SINK_FORMAT_OPTIONS if name == "sink" else FORMAT_OPTIONS))
    if kind == "windows":
        from spark_ext.windows.api import ARGUMENTS

        return ARGUMENTS
    connector: Any = registry.load(KINDS[kind], name or None, f"docs marker 'options: {kind}'")
    spec = connector.option_spec
    assert isinstance(spec, OptionSpec)
    return spec


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(spec: OptionSpec, what: str) -> str:
    """A Markdown table of ``spec``'s documented options."""
    missing = spec.undocumented()
    if missing:
        raise OptionTableError(f"{what}: option(s) without a description: {', '.join(missing)}")
    rows = ["| option | default | description |", "| --- | --- | --- |"]
    for o in spec.documented:
        default = o.default_text()
        if o.shown is None and default and default != "required":
            default = f"`{default}`"
        rows.append(f"| `{o.name}` | {_cell(default)} | {_cell(o.description)} |")
    return "\n".join(rows)


def render(markdown: str) -> str:
    """``markdown`` with every marker replaced by its table."""

    def one(m: re.Match[str]) -> str:
        kind, name = m.group(1), m.group(2)
        return table(spec_for(kind, name), f"options: {kind} {name}".strip())

    done = METRICS_MARKER.sub(lambda _: metrics_table(), MARKER.sub(one, markdown))
    return PARITY_MARKER.sub(lambda _: parity_table(), done)


METRICS_MARKER = re.compile(r"<!--\s*metrics\s*-->")
PARITY_MARKER = re.compile(r"<!--\s*kafka-parity\s*-->")


def parity_table() -> str:
    """The Kafka source against Spark's (``spark_ext.connectors.kafka.source.parity``)."""
    from spark_ext.connectors.kafka.source.parity import PARITY

    rows = ["| option | Spark's `kafka` source | `hzsource` | since PySpark |", "| --- | --- | --- | --- |"]
    for p in PARITY:
        rows.append(f"| `{p.option}` | {_cell(p.spark)} | {_cell(p.ours)} | {p.since} |")
    return "\n".join(rows)


def metrics_table() -> str:
    """The exporter's metrics (``spark_ext.monitoring.metrics``) as a Markdown table."""
    from spark_ext.monitoring.metrics import METRICS

    rows = ["| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for m in METRICS:
        labels = ", ".join(f"`{x}`" for x in m.labels)
        rows.append(f"| `{m.name}` | {m.kind} | {labels} | {_cell(m.help)} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    try:
        return render(markdown)
    except Exception as e:  # any failure here fails the build; say which page it came from
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_uri}: {e}") from e
