"""``make test-compat``: the compat subset on another PySpark and Python, from the built wheel.

    python -m tests.compat_env --pyspark 4.1.4 --python 3.12 [pytest args...]

1. A virtualenv per (Python, PySpark), cached outside git (``$SPARK_EXT_COMPAT_DIR``,
   default ``~/.cache/spark-ext/compat``), holding that PySpark and the test tools only.
2. The wheel of the working tree is installed into it with every extra, as a user would
   (``pip install spark_ext-*.whl[all]``), and must leave that PySpark in place.
3. The tests run from a copy of ``tests/``, ``services/`` and ``bench/`` outside the
   checkout with no ``PYTHONPATH`` into it, so the driver and PySpark's workers import
   the installed wheel, never the repository; only tests marked ``compat`` run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ["pytest>=8", "pytest-timeout>=2.3", "pytest-xdist>=3.5", "hypothesis>=6.100", "pyyaml>=6"]
# What test modules import as references beside the wheel's own extras (the registry formats'
# serializers): installed with every wheel, so an environment cached before they were
# needed gets them too (pip leaves what is there).
REFERENCES = ["confluent-kafka[avro,json,protobuf]>=2.6"]
STAGED = ("tests", "services", "bench", "setup.cfg")


class CompatError(Exception):
    """The environment for a release could not be built."""


def interpreter(version: str) -> Path:
    """The newest installed CPython ``version`` (``3.12``): pyenv's, else one on ``PATH``."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    pattern = rf"{re.escape(version)}\.\d+"
    found = sorted((p for p in root.glob(f"{version}.*") if re.fullmatch(pattern, p.name)),
                   key=lambda p: int(p.name.rsplit(".", 1)[1]))
    if found:
        return found[-1] / "bin" / "python"
    on_path = shutil.which(f"python{version}")
    if on_path:
        return Path(on_path)
    raise CompatError(f"no Python {version} here: install it (pyenv install {version}) "
                      "or pass another PYTHON=")


def _run(argv: list[str | Path], what: str, **kw: object) -> str:
    res = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if res.returncode != 0:
        raise CompatError(f"{what} failed ({res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}")
    return str(res.stdout)


def _clean_env() -> dict[str, str]:
    """This environment without what points into the checkout or the suite's virtualenv."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return env


def environment(python: str, pyspark: str, cache: Path) -> Path:
    """The cached virtualenv for (``python``, ``pyspark``), built on first use."""
    env_dir = cache / f"py{python}-pyspark-{pyspark}"
    py = env_dir / "bin" / "python"
    if (env_dir / ".ready").exists():
        return py
    shutil.rmtree(env_dir, ignore_errors=True)
    base = interpreter(python)
    print(f"[compat] building {env_dir} from {base}", flush=True)
    _run([base, "-m", "venv", env_dir], "creating the virtualenv", env=_clean_env())
    _run([py, "-m", "pip", "install", "-q", f"pyspark=={pyspark}", *TOOLS], f"installing PySpark {pyspark}",
         env=_clean_env(), timeout=1800)
    (env_dir / ".ready").touch()
    return py


def install_wheel(py: Path, pyspark: str, work: Path) -> None:
    """The working tree's wheel with every extra; PySpark must stay ``pyspark``."""
    sys.path.insert(0, str(ROOT))
    from tests.support.wheel import build_wheel

    wheel = build_wheel(work)
    env = _clean_env()
    _run([py, "-m", "pip", "uninstall", "-q", "-y", "spark-ext"], "removing the last wheel", env=env)
    # Naming the release too makes pip fail, not replace it, if the wheel does not admit it.
    _run([py, "-m", "pip", "install", "-q", f"{wheel}[all]", f"pyspark=={pyspark}", *REFERENCES],
         f"installing {wheel.name} beside PySpark {pyspark}", env=env, timeout=1800)
    have = _run([py, "-c", "import pyspark; print(pyspark.__version__)"], "reading PySpark's version",
                env=env, cwd=work).strip()
    if have != pyspark:
        raise CompatError(f"installing {wheel.name} replaced PySpark {pyspark} with {have}: "
                          "its pyspark requirement (pyproject.toml) does not admit this release")


def stage(work: Path) -> Path:
    """A copy of what the tests import besides spark_ext, outside the checkout."""
    dest = work / "stage"
    dest.mkdir()
    for name in STAGED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "results"))
        else:
            shutil.copy2(src, dest / name)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pyspark", required=True, help="a PySpark release, e.g. 4.1.4")
    ap.add_argument("--python", required=True, help="a Python major.minor, e.g. 3.12")
    ap.add_argument("--workers", default="2", help="pytest-xdist workers")
    args, pytest_args = ap.parse_known_args(argv)
    cache = Path(os.environ.get("SPARK_EXT_COMPAT_DIR", Path.home() / ".cache" / "spark-ext" / "compat"))
    services_env = Path(os.environ.get("SPARK_EXT_SERVICES_ENV", ROOT / ".local" / "services.env"))
    try:
        py = environment(args.python, args.pyspark, cache)
        with tempfile.TemporaryDirectory(prefix="spark-ext-compat-") as tmp:
            work = Path(tmp)
            install_wheel(py, args.pyspark, work)
            where = stage(work)
            env = {**_clean_env(), "SPARK_EXT_SERVICES_ENV": str(services_env)}
            found = _run([py, "-c", "import spark_ext; print(spark_ext.__file__)"], "importing spark_ext",
                         env=env, cwd=where).strip()
            if not found.startswith(str(py.parent.parent)):
                raise CompatError(f"spark_ext was imported from {found}, not from the installed wheel")
            print(f"[compat] PySpark {args.pyspark}, Python {args.python}: spark_ext from {found}",
                  flush=True)
            workers = ["-n", args.workers, "--dist", "worksteal"] if args.workers not in ("0", "1") else []
            return subprocess.call([str(py), "-m", "pytest", "-p", "no:cacheprovider", "-m", "compat",
                                    *workers, "--durations=10", *pytest_args], cwd=where, env=env)
    except CompatError as e:
        print(f"[compat] {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
