"""How our objects travel to executors: so a missing package names its fix.

Spark pickles the data source, its stream reader and its writer on the driver and unpickles
them in each task's Python worker. Where that worker's Python lacks spark-ext or one of its
dependencies, the task would fail with a bare ``ModuleNotFoundError`` deep in PySpark. A
``Shipped`` object pickles as ``revive(module, class, state)``; this module is pickled by
value (``compat.pickle_by_value``), so ``revive`` runs on the executor even where nothing
of ours can be imported, and raises an ``ImportError`` that says how to ship the
environment. It therefore imports only the standard library at module level.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

HINT = (
    "spark-ext cannot run in this executor's Python ({python}): {error}. Executors need the "
    "driver's packages. Ship them as Spark documents for Python dependencies: pack a virtualenv "
    "holding spark-ext (venv-pack) and submit with --archives env.tar.gz#environment and "
    "PYSPARK_PYTHON=./environment/bin/python (Python data sources also run PYSPARK_DRIVER_PYTHON on "
    "executors, so in client mode use a path that exists on both, e.g. the same ./environment "
    "unpacked in the driver's working directory), or install spark-ext on every node. See "
    "'Running on a cluster' in the spark-ext documentation (docs/cluster.md)."
)


def revive(module: str, qualname: str, state: Any) -> Any:
    """Executor (and driver), when Spark unpickles a ``Shipped`` object."""
    try:
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        from pyspark import cloudpickle

        value = cloudpickle.loads(state)  # imports the connector's modules and their dependencies
    except ImportError as e:
        raise ImportError(HINT.format(python=sys.executable or os.environ.get("PYSPARK_PYTHON"),
                                      error=f"{type(e).__name__}: {e}")) from e
    obj = cls.__new__(cls)
    setstate = getattr(obj, "__setstate__", None)
    if setstate is not None:
        setstate(value)
    elif value:
        obj.__dict__.update(value)
    return obj


class Shipped:
    """Mixin for objects Spark sends to executors: see the module docstring."""

    def __reduce__(self) -> tuple[Any, ...]:
        from pyspark import cloudpickle

        # The state is opaque bytes, so the outer unpickler imports none of our classes
        # before ``revive`` has checked that it can.
        state = cloudpickle.dumps(self.__getstate__(), protocol=5)
        return (revive, (type(self).__module__, type(self).__qualname__, state))


def _register() -> None:
    from spark_ext import compat

    compat.pickle_by_value(sys.modules[__name__])


_register()
