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


def test_no_module_exceeds_the_size_limit():
    dirs = ["spark_ext", "services", "bench", "examples"]
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for d in dirs for p in (ROOT / d).rglob("*.py")}
    assert sizes, "no modules found"
    assert {k: n for k, n in sizes.items() if n > MAX_LINES} == {}


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
