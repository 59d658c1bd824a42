"""Processing guarantees (Jet's EXACTLY_ONCE / AT_LEAST_ONCE / NONE), chosen per query."""

from __future__ import annotations

import enum

from spark_ext.errors import UnknownGuaranteeError


class Guarantee(enum.Enum):
    """What a sink promises about its committed output after failures and restarts."""

    #: Output of a batch becomes visible once, atomically, when Spark commits the batch.
    EXACTLY_ONCE = "exactly_once"
    #: Nothing is lost; a replayed batch may write its rows again (idempotent sinks converge).
    AT_LEAST_ONCE = "at_least_once"
    #: Best effort: rows in flight at a failure may be lost or duplicated.
    NONE = "none"

    @classmethod
    def parse(cls, value: str | None, default: Guarantee) -> Guarantee:
        """Parse option ``guarantee`` (case and ``-``/``_`` insensitive)."""
        if value is None or value.strip() == "":
            return default
        norm = value.strip().lower().replace("-", "_")
        for g in cls:
            if g.value == norm:
                return g
        choices = ", ".join(g.value for g in cls)
        raise UnknownGuaranteeError(
            f"unknown guarantee {value!r}: option 'guarantee' takes one of {choices}"
        )

    @property
    def transactional(self) -> bool:
        """True when the sink must prepare in tasks and commit on the driver (2PC)."""
        return self is Guarantee.EXACTLY_ONCE
