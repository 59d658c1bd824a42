"""``make faults``: a seeded fault campaign per pipeline, one ``FAULTS`` line each, last.

Each pipeline (``bench/faults/pipelines.py``) is a real streaming query in its own OS
process over a fixed input of unique ids. The campaign (``bench/faults/campaign.py``)
crashes it at every failpoint of its source and sink once, and at seeded random points
kills the driver's process group, kills a task after it prepared (Spark retries it),
restarts a broker or the database under the running query, starts a second (zombie) run
of the same query, or deletes the checkpoint and restarts the query on new input. A
last clean run reads the input to its end; then the sink is compared with the input:

``FAULTS pipeline=<name> status=held|broken|interrupted guarantee=<g> crashes=<n>
expected=<n> due=<n> committed=<n> lost=<n> duplicated=<n> in_doubt=<n> [reason="..."]``

``crashes`` counts the faults injected; ``in_doubt`` what the sink left open after the
last run (prepared PostgreSQL transactions, open Kafka transactions of its prefix, staged
queue messages). ``due`` is what the sink had to hold: all the input when the campaign
ran to its end, else (``interrupted``, with its ``reason``) only what the batches Spark
committed had read; ``lost`` counts records due and missing, never input no run read.
``broken``: a record due was lost or written twice, or (run to its end) left in doubt.
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
from services import scratch as local_scratch


@dataclass(frozen=True)
class Outcome:
    """What the sink committed against what it had to, for one pipeline."""

    name: str
    crashes: int
    expected: int
    committed: int
    lost: int
    duplicated: int
    in_doubt: int
    guarantee: str = "exactly_once"
    error: str = ""  # why the campaign broke off (a driver hung, a service would not come back)
    missed: tuple[str, ...] = ()  # faults whose episode ended before they could strike
    due: int = -1  # what the sink had to hold: all input, or what committed batches read (broken off)
    replay: str = ""  # the command that replays the campaign

    @property
    def kept(self) -> bool:
        """Nothing due lost; for exactly_once also nothing twice and, when the campaign ran
        to its end, nothing left in doubt (a run broken off may leave a batch for the next)."""
        if self.guarantee != "exactly_once":
            return self.lost == 0
        return self.lost == 0 and self.duplicated == 0 and (self.in_doubt == 0 or bool(self.error))

    @property
    def status(self) -> str:
        """held: ran to its end, guarantee kept; broken: a record due was lost, written twice or
        left in doubt; interrupted: broken off before its end, nothing due missing."""
        if not self.kept:
            return "broken"
        return "interrupted" if self.error else "held"

    @property
    def held(self) -> bool:
        return self.status == "held"

    def line(self) -> str:
        reason = f' reason="{_one_line(self.error)}"' if self.error else ""
        return (f"FAULTS pipeline={self.name} status={self.status} guarantee={self.guarantee} "
                f"crashes={self.crashes} expected={self.expected} due={self.due} committed={self.committed} "
                f"lost={self.lost} duplicated={self.duplicated} in_doubt={self.in_doubt}{reason}")


def _one_line(text: str, limit: int = 600) -> str:
    flat = " ".join(text.split()).replace('"', "'")
    return flat if len(flat) <= limit else flat[:limit] + "..."


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
    ids, due, in_doubt = _what_the_sink_holds(run, error)
    if error and due is not run.expected:
        say(f"{p.name}: broken off; counting against the {len(due)} records committed batches had read")
    lost, duplicated = count(ids, due)
    outcome = Outcome(p.name, ep.injected, len(run.expected), len(ids), lost, duplicated, in_doubt,
                      p.guarantee, error, tuple(missed), len(due), replay)
    for failure in ep.failures:
        say(f"{p.name}: a run ended in an error (a fault's effect): {failure}")
    if error:
        _finish_broken_off(ep, p)
    if outcome.held:
        run.cleanup()
    else:
        say(f"{p.name}: BROKEN; replay with `{replay or 'the same faults'}`; faults: {' '.join(done)}; "
            f"sink {run.out}, checkpoint {run.checkpoint}")
    return outcome


def _finish_broken_off(ep: Episodes, p: Pipeline) -> None:
    """After a broken-off campaign was counted: its last run may have died inside a batch,
    leaving transactions in doubt on the shared servers (Kafka's stay open until their
    timeout). A clean run to the end finishes or rolls them back; if the services are
    still away it fails, and says so."""
    try:
        ep.final()
    except Exception as e:  # noqa: BLE001 - the campaign's outcome stands; this only tidies up
        say(f"{p.name}: the run after the break-off could not finish what is in doubt: {e}")


def _what_the_sink_holds(run: PipelineRun, error: str) -> tuple[list[str], set[str], int]:
    """(what the sink holds, what it had to hold, what it left in doubt). A campaign that
    ran to its end had to hold all its input; one broken off only what the batches Spark
    committed had read. A service still away leaves the count at nothing due."""
    try:
        ids = run.committed()
        due = run.due() if error else run.expected
        return ids, due, run.in_doubt()
    except Exception as e:  # the reason joins the FAULTS line instead
        if not error:
            raise
        say(f"{run.p.name}: the sink could not be read after the campaign broke off: {e}")
        return [], set(), 0


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
    # The drivers a campaign kills -9 never delete Spark's spark-*/blockmgr-* directories:
    # every driver's go under one directory, removed at the end.
    scratch = local_scratch.claim("faults")
    try:
        for name in names:
            tmp = Path(tempfile.mkdtemp(prefix=f"faults-{name}-"))
            outcomes.append(PIPELINES[name](tmp, seed, args.crashes))
            if outcomes[-1].held:
                shutil.rmtree(tmp, ignore_errors=True)  # else kept: the checkpoint, for a look
    finally:
        local_scratch.release(scratch)
    for o in outcomes:
        print(o.line(), flush=True)
    failed = [o for o in outcomes if not o.held]
    for o in failed:  # last, so the reason is what a reader sees
        what = "guarantee broken" if o.status == "broken" else "campaign broken off"
        print(f"{o.name}: {what}{': ' + _one_line(o.error) if o.error else ''}; replay with `{o.replay}`",
              file=sys.stderr)
    return 1 if failed else 0
