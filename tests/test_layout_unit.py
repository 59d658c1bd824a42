"""The layout rules of the code base, checked: the core imports no connector, imports run down the
layers, and no module imports itself round a circle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


CONNECTORS = ROOT / "spark_ext" / "connectors"


def _is_connector(module: str) -> bool:
    return module == "spark_ext.connectors" or module.startswith("spark_ext.connectors.")


def test_the_core_imports_no_connector():
    core = [p for p in (ROOT / "spark_ext").rglob("*.py") if CONNECTORS not in p.parents]
    offenders = {str(p.relative_to(ROOT)): sorted(m for m in _imports(p) if _is_connector(m)) for p in core}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_only_top_level_packages_are_ours():
    """A top-level ``connectors`` (or any other generic name) would collide in site-packages."""
    packages = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").exists())
    assert packages == ["bench", "examples", "services", "spark_ext", "tests"]


def test_connectors_do_not_import_each_other():
    for conn in CONNECTORS.iterdir():
        if not (conn / "__init__.py").exists():
            continue
        for p in conn.rglob("*.py"):
            others = {m.split(".")[2] for m in _imports(p)
                      if m.startswith("spark_ext.connectors.") and m.split(".")[2] != conn.name}
            assert not others, f"{p.relative_to(ROOT)} imports connectors {sorted(others)}"


# The layers of spark_ext, lowest first: a module imports only from its own layer or a lower
# one. A module holds one concern and is split when it holds two, whatever its length.
LAYERS: tuple[tuple[str, ...], ...] = (
    # what every part uses: errors, options, the PySpark seams, the release
    ("spark_ext.errors", "spark_ext.retry", "spark_ext.compat", "spark_ext.failpoints",
     "spark_ext.guarantees", "spark_ext.options", "spark_ext.secrets", "spark_ext.shipping",
     "spark_ext.worker_heap",
     "spark_ext.release", "spark_ext.formats", "spark_ext.env", "spark_ext.partitioning",
     "spark_ext.registry",
     "spark_ext.monitoring.cards", "spark_ext.monitoring.metrics"),
    # the commit protocol and what it reports
    ("spark_ext.commit", "spark_ext.timeline", "spark_ext.deadletters", "spark_ext.decisions",
     "spark_ext.schemas"),
    # Spark's writers over the protocol; what a connector implements
    ("spark_ext.stream", "spark_ext.batch", "spark_ext.connector"),
    # sinks and operators built from connectors: routing, windows
    ("spark_ext.routing", "spark_ext.windows"),
    # operators' tools shared by the connectors: status rows, doctors, the exporter
    ("spark_ext.status", "spark_ext.doctor", "spark_ext.monitoring"),
    ("spark_ext.connectors",),
    # entry points: the data sources, the command line, the package itself
    ("spark_ext.datasource", "spark_ext.cli", "spark_ext.__main__", "spark_ext"),
)


def _module_graph() -> dict[str, set[str]]:
    """spark_ext's modules and what each imports of spark_ext, function-level and
    relative imports included (a deferred import hides a circle from Python, not from here)."""
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / "spark_ext").rglob("*.py")}
    # A compiled module is known by its stub (``_records.pyi``): it imports nothing of ours.
    files.update({".".join(p.relative_to(ROOT).with_suffix("").parts): p
                  for p in (ROOT / "spark_ext").rglob("*.pyi") if not p.with_suffix(".py").exists()})

    def known(name: str) -> str:
        while name not in files:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                out.update(known(a.name) for a in node.names if a.name.startswith("spark_ext"))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
                if base.startswith("spark_ext"):
                    out.update(known(f"{base}.{a.name}" if f"{base}.{a.name}" in files else base)
                               for a in node.names)
        graph[name] = out - {name}
    return graph


def _layer(module: str) -> int:
    best = [(len(prefix), i) for i, layer in enumerate(LAYERS) for prefix in layer
            if module == prefix or module.startswith(prefix + ".")]
    assert best, f"{module} is in no layer of tests/test_layout_unit.py: place it"
    return max(best)[1]


def test_imports_run_from_higher_layers_to_lower_ones_only():
    graph = _module_graph()
    upward = {f"{m} -> {d}" for m, deps in graph.items() for d in deps if _layer(d) > _layer(m)}
    assert sorted(upward) == []


def test_no_import_circles():
    graph, circles = _module_graph(), []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []


def test_public_window_imports_keep_working():
    from spark_ext import aggregate, windows
    from spark_ext.windows import session, sliding, tumbling

    assert aggregate.__name__ == "spark_ext.windows.aggregate"
    assert callable(windows.sliding) and callable(sliding) and callable(tumbling) and callable(session)


def test_test_modules_share_helpers_through_tests_support_only():
    """A test module importing another's helpers (or conftest's) couples the two; shared
    helpers live in tests/support/."""
    offenders = {str(p.relative_to(ROOT)): sorted(m for m in _imports(p)
                                                  if m.startswith(("tests.test_", "tests.conftest")))
                 for p in (ROOT / "tests").glob("test_*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}
