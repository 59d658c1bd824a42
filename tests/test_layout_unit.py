"""The layout rules of the code base, checked: the core imports no connector, modules stay small."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 500


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_the_core_imports_no_connector():
    offenders = {str(p.relative_to(ROOT)): sorted(m for m in _imports(p) if m.split(".")[0] == "connectors")
                 for p in (ROOT / "spark_ext").rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_connectors_do_not_import_each_other():
    for conn in (ROOT / "connectors").iterdir():
        if not (conn / "__init__.py").exists():
            continue
        for p in conn.rglob("*.py"):
            others = {m.split(".")[1] for m in _imports(p)
                      if m.startswith("connectors.") and m.split(".")[1] != conn.name}
            assert not others, f"{p.relative_to(ROOT)} imports connectors {sorted(others)}"


def test_no_module_exceeds_the_size_limit():
    dirs = ["spark_ext", "connectors", "services", "bench", "examples"]
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for d in dirs for p in (ROOT / d).rglob("*.py")}
    assert sizes, "no modules found"
    assert {k: n for k, n in sizes.items() if n > MAX_LINES} == {}
