"""``make faults``: a seeded fault campaign per pipeline, one ``FAULTS`` line each, last.

Each pipeline (``bench/faults/pipelines.py``) is a real streaming query in its own OS
process over a fixed input of unique ids. The campaign (``bench/faults/campaign.py``)
crashes it at every failpoint of its source and sink once, and at seeded random points
kills the driver's process group, kills a task after it prepared (Spark retries it),
restarts a broker or the database under the running query, starts a second (zombie) run
of the same query, or deletes the checkpoint and restarts the query on new input. A
last clean run reads the input to its end; then the sink is compared with the input:

``FAULTS pipeline=<name> guarantee=<g> crashes=<n> expected=<n> committed=<n> lost=<n>
duplicated=<n> in_doubt=<n>``

``crashes`` counts the faults injected; ``in_doubt`` what the sink left open after the
last run (prepared PostgreSQL transactions, open Kafka transactions of its prefix).
Options: ``--seed N`` (replays a campaign: the same faults in the same order),
``--crashes N`` (faults per pipeline, default 10), pipeline names (default: all).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.faults.campaign import CampaignError, Episodes, Fault, plan
from bench.faults.pipelines import PIPELINES as SPECS
from bench.faults.pipelines import Pipeline, PipelineRun, count


@dataclass(frozen=True)
class Outcome:
    """What the sink committed against what went in, for one pipeline."""

    name: str
    crashes: int
    expected: int
    committed: int
    lost: int
    duplicated: int
    in_doubt: int
    guarantee: str = "exactly_once"
    error: str = ""  # the campaign was broken off (a driver hung, a last run kept failing)
    missed: tuple[str, ...] = ()  # faults whose episode ended before they could strike

    @property
    def held(self) -> bool:
        """Nothing lost; for exactly_once also nothing twice and nothing left in doubt."""
        if self.error:
            return False
        if self.guarantee != "exactly_once":
            return self.lost == 0
        return self.lost == 0 and self.duplicated == 0 and self.in_doubt == 0

    def line(self) -> str:
        return (f"FAULTS pipeline={self.name} guarantee={self.guarantee} crashes={self.crashes} "
                f"expected={self.expected} committed={self.committed} lost={self.lost} "
                f"duplicated={self.duplicated} in_doubt={self.in_doubt}")


def say(msg: str) -> None:
    print(f"[faults] {msg}", file=sys.stderr, flush=True)


def campaign(p: Pipeline, tmp: Path, seed: int, crashes: int, per_trigger: int = 40,
             every_point: bool = True) -> Outcome:
    """Run ``p``'s seeded campaign; at least ``crashes`` faults when the input allows.
    ``every_point``: crash at each of the pipeline's failpoints too (``make faults``)."""
    say(f"{p.name}: seed={seed}")
    return run_faults(p, tmp, plan(p, seed, crashes, every_point), crashes, per_trigger,
                      reserve=plan(p, seed + 1_000_003, crashes, every_point=False),
                      replay=f"make faults SEED={seed} FAULTS_CRASHES={crashes} PIPELINES={p.name}")


def run_faults(p: Pipeline, tmp: Path, faults: Sequence[Fault], crashes: int | None = None,
               per_trigger: int = 40, reserve: Sequence[Fault] = (), replay: str = "") -> Outcome:
    """Carry out ``faults`` in order against a fresh run of ``p``, then faults from
    ``reserve`` until ``crashes`` (default: one per fault) were injected, a last clean run,
    and the count. A fault whose episode ended before it could strike is listed in
    ``Outcome.missed``."""
    crashes = len(faults) if crashes is None else crashes
    # Input for every episode (each commits at most after + 3 batches) and some to spare.
    run = PipelineRun(p, tmp, per_trigger * (sum(f.after + 3 for f in [*faults, *reserve]) + 5), per_trigger)
    say(f"{p.name}: plan: {' '.join(map(str, faults))}")
    ep = Episodes(run, say)
    done: list[str] = []
    missed: list[str] = []
    error = ""
    try:
        for f in [*faults, *reserve]:
            if len(done) >= len(faults) and ep.injected >= crashes:
                break
            t0, before = time.monotonic(), ep.injected
            ep(f)
            done.append(str(f))
            if ep.injected == before:
                missed.append(str(f))
            say(f"{p.name}: {f} done in {time.monotonic() - t0:.0f} s; {ep.injected} faults injected")
        ep.final()
    except CampaignError as e:
        error = str(e)
        say(f"{p.name}: campaign broken off: {e}")
    ids = run.committed()
    lost, duplicated = count(ids, run.expected)
    outcome = Outcome(p.name, ep.injected, len(run.expected), len(ids), lost, duplicated, run.in_doubt(),
                      p.guarantee, error, tuple(missed))
    for failure in ep.failures:
        say(f"{p.name}: a run ended in an error (a fault's effect): {failure}")
    if outcome.held:
        run.cleanup()
    else:
        say(f"{p.name}: BROKEN; replay with `{replay or 'the same faults'}`; faults: {' '.join(done)}; "
            f"sink {run.out}, checkpoint {run.checkpoint}")
    return outcome


PIPELINES: dict[str, Callable[..., Outcome]] = {
    name: (lambda tmp, seed, crashes, p=spec: campaign(p, tmp, seed, crashes)) for name, spec in SPECS.items()
}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="make faults")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--crashes", type=int, default=10)
    ap.add_argument("pipelines", nargs="*")
    args = ap.parse_args(argv)
    names = args.pipelines or list(PIPELINES)
    unknown = [n for n in names if n not in PIPELINES]
    if unknown:
        print(f"unknown pipeline {unknown[0]!r}; available: {', '.join(PIPELINES)}", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    say(f"seed={seed} crashes={args.crashes} pipelines={' '.join(names)}")
    outcomes = []
    for name in names:
        tmp = Path(tempfile.mkdtemp(prefix=f"faults-{name}-"))
        outcomes.append(PIPELINES[name](tmp, seed, args.crashes))
        if outcomes[-1].held:
            shutil.rmtree(tmp, ignore_errors=True)  # else kept: the checkpoint, for a look
    for o in outcomes:
        print(o.line(), flush=True)
    broken = [o.name for o in outcomes if not o.held]
    if broken:
        print(f"guarantee broken in: {', '.join(broken)} (seed={seed}; `make faults SEED={seed}` replays)",
              file=sys.stderr)
        return 1
    return 0
