"""A seeded fault campaign against one pipeline: the plan, and each fault carried out.

Every fault is an *episode*: a driver process is started from the pipeline's checkpoint,
the fault is injected once the run has committed ``after`` batches of its own (so a
crash can catch duplicates, not only loss), and the episode ends with every driver of
it gone. The seed fixes the sequence of faults and their ``after``; the moment within a
batch at which a kill lands is the machine's.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT
from bench.faults.pipelines import Pipeline, PipelineRun

EPISODE_TIMEOUT_S = 300
RUSH = 2000  # records per batch for a run that only has to read the rest of its input
FREEZE_S = 20  # how long a frozen service stays stopped (SIGSTOP ... SIGCONT)


@dataclass(frozen=True)
class Fault:
    """One fault: ``kind`` is kill | failpoint | task | restart | freeze | zombie | reset | move; ``target``
    names the failpoint or service; ``after``: batches the run commits first."""

    kind: str
    target: str = ""
    after: int = 1

    def __str__(self) -> str:
        return f"{self.kind}{':' + self.target if self.target else ''}+{self.after}"


def plan(p: Pipeline, seed: int, crashes: int, every_point: bool = True) -> list[Fault]:
    """Every failpoint of the pipeline once (unless not ``every_point``), then seeded
    random faults up to ``crashes`` in all, in a seeded order."""
    rng = random.Random(f"{seed}/{p.name}")
    faults = [Fault("failpoint", fp, rng.randint(1, 2)) for fp in p.points] if every_point else []
    menu = [Fault("kill"), Fault("kill"), Fault("task", p.task_point), Fault("zombie"),
            *(Fault("restart", s) for s in p.services), *(Fault("freeze", s) for s in p.services)]
    if p.resets:
        menu.append(Fault("reset"))
    if p.exactly_once:
        menu.append(Fault("move"))
    while len(faults) < crashes:
        f = rng.choice(menu)
        faults.append(Fault(f.kind, f.target, rng.randint(1, 3)))
    rng.shuffle(faults)
    return faults


def short_plan(pipelines: Sequence[Pipeline],
               covered: frozenset[str] = frozenset()) -> dict[str, list[Fault]]:
    """The short campaign ``make faults`` runs first: every failpoint of any pipeline
    crashed once (each driver point, and each task point as a killed task), one driver kill, one
    zombie run and one moved checkpoint (on exactly_once pipelines) and one checkpoint reset, each
    given to the pipeline that has the fewest faults so far among those it applies to.
    ``covered``: points the suite crashes elsewhere (the sink conformance suite, every sink at
    every step), left out here; a task point is named ``task:<point>``. No service restarts: those run alone
    (tests marked ``restarts_services``). Fixed, so CI runs the same faults every time."""
    faults: dict[str, list[Fault]] = {p.name: [] for p in pipelines}

    def give(kind: str, target: str, where: list[Pipeline]) -> None:
        faults[min(where, key=lambda p: len(faults[p.name])).name].append(Fault(kind, target, 1))

    points = dict.fromkeys(fp for p in pipelines for fp in p.points if fp not in covered)
    # The points fewest pipelines have go first, so a widely shared one fills the gaps.
    for fp in sorted(points, key=lambda fp: sum(fp in p.points for p in pipelines)):
        give("failpoint", fp, [p for p in pipelines if fp in p.points])
    for tp in dict.fromkeys(p.task_point for p in pipelines if f"task:{p.task_point}" not in covered):
        give("task", tp, [p for p in pipelines if p.task_point == tp])
    give("reset", "", [p for p in pipelines if p.resets])
    give("zombie", "", [p for p in pipelines if p.exactly_once])  # where a duplicate is a failure
    give("move", "", [p for p in pipelines if p.exactly_once])
    give("kill", "", list(pipelines))
    return faults


class CampaignError(Exception):
    """An episode could not be carried out (a driver hung, a service did not come back)."""


class Episodes:
    """Carries out faults against one pipeline; counts the faults actually injected."""

    def __init__(self, run: PipelineRun, say: Callable[[str], None]) -> None:
        self.run = run
        self.say = say
        self.injected = 0
        self.failures: list[str] = []  # drivers that ended in an error (fault effects, for the log)
        self._live: dict[int, tuple[subprocess.Popen, Path]] = {}
        self._started = 0

    def start(self, failpoint: str = "-", per_trigger: int | None = None) -> subprocess.Popen:
        """A driver of the pipeline's query; its stderr goes to ``driver-<n>.log`` beside
        the checkpoint (kept when the campaign finds a broken guarantee)."""
        self._started += 1
        log = self.run.tmp / f"driver-{self._started}.log"
        with open(log, "w") as err:
            p = subprocess.Popen(self.run.argv(failpoint, per_trigger), cwd=ROOT, start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=err)
        self._live[p.pid] = (p, log)
        return p

    def wait_batches(self, procs: list[subprocess.Popen], n: int,
                     timeout_s: float = EPISODE_TIMEOUT_S) -> bool:
        """Until ``n`` more batches are in Spark's commit log (True), or every driver ended."""
        target = self.run.last_batch() + n
        deadline = time.monotonic() + timeout_s
        while self.run.last_batch() < target:
            if all(p.poll() is not None for p in procs):
                return False
            if time.monotonic() > deadline:
                raise CampaignError(f"{self.run.p.name}: no progress in {timeout_s:.0f} s")
            time.sleep(0.1)
        return True

    def end(self, procs: list[subprocess.Popen], kill: bool) -> None:
        """Kill (``kill -9`` of the process group) or wait for every driver of the episode."""
        for p in procs:
            if kill and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                self.injected += 1
            try:
                p.wait(timeout=EPISODE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise CampaignError(f"{self.run.p.name}: a driver did not end within {EPISODE_TIMEOUT_S} s"
                                    ) from None
            _, log = self._live.pop(p.pid)
            if p.returncode not in (0, -9, 3):
                self.failures.append(f"exit {p.returncode}: {_cause(log.read_text(errors='replace'))} "
                                     f"({log.name})")

    def kill_all(self) -> None:
        """Kill every driver still running (after a broken-off episode)."""
        for p, _ in self._live.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self._live.clear()

    def __call__(self, f: Fault) -> None:
        try:
            self._revive()
            getattr(self, f"_{f.kind}")(f)
        except CampaignError:
            self.kill_all()
            raise

    def _revive(self) -> None:
        """Start again a service of ours found dead between episodes (seen: a Kafka broker
        that came back from a restart and died on its metadata log seconds later)."""
        from services.common import LOCAL, _read_pid

        for name in self.run.p.services:
            if (LOCAL / f"{name}.pid").exists() and _read_pid(name) is None:
                self.say(f"{name} was found dead between episodes; starting it")
                self._services("up", name)

    def _services(self, verb: str, name: str) -> None:
        r = subprocess.run([sys.executable, "-m", "services", verb, name], cwd=ROOT,
                           capture_output=True, text=True, timeout=EPISODE_TIMEOUT_S)
        if r.returncode != 0:
            raise CampaignError(f"`services {verb} {name}` failed: {r.stdout[-1500:]}{r.stderr[-1500:]}")

    def _kill(self, f: Fault) -> None:
        p = self.start()
        self.end([p], kill=self.wait_batches([p], f.after))

    def _failpoint(self, f: Fault) -> None:
        # A batch-numbered point where the batch id is Spark's; a queue's ack points count
        # the source's own batches, so they fire at the first hit with data instead.
        at = "" if f.target.startswith("jms.") else f"@{self.run.last_batch() + 1 + f.after}"
        p = self.start(f.target + at)
        self.end([p], kill=False)
        if p.returncode == -9:
            self.injected += 1
        else:  # the point never struck (e.g. mid_commit in batches of one transaction): the run
            self.run.extend_input()  # read the input to its end, and later episodes need some

    def _task(self, f: Fault) -> None:
        p = self.start(f"task:{f.target}@{self.run.last_batch() + 1 + f.after}")
        alive = self.wait_batches([p], f.after + 2)  # past the batch whose task died and was retried
        self.injected += 1 if alive else 0
        self.end([p], kill=alive)

    def _restart(self, f: Fault) -> None:
        p = self.start()
        if not self.wait_batches([p], f.after):
            self.end([p], kill=False)
            return
        self.say(f"restarting {f.target} under the running query")
        for verb in ("down", "up"):
            self._services(verb, f.target)
        self.injected += 1
        self.end([p], kill=self.wait_batches([p], 2))

    def _freeze(self, f: Fault) -> None:
        """The service's whole process group stopped (SIGSTOP) for ``FREEZE_S`` under the
        running query, as a long GC pause or a hung VM would, then resumed."""
        from services.common import _read_pid

        p = self.start()
        if not self.wait_batches([p], f.after):
            self.end([p], kill=False)
            return
        pid = _read_pid(f.target)
        if pid is None:
            raise CampaignError(f"{f.target} is not running: nothing to freeze")
        self.say(f"freezing {f.target} for {FREEZE_S} s under the running query")
        os.killpg(pid, signal.SIGSTOP)
        try:
            time.sleep(FREEZE_S)
        finally:
            os.killpg(pid, signal.SIGCONT)
        self.injected += 1
        self.end([p], kill=self.wait_batches([p], 2))

    def _zombie(self, f: Fault) -> None:
        first = self.start()
        if not self.wait_batches([first], f.after):
            self.end([first], kill=False)
            return
        second = self.start()  # the same query, same checkpoint, while the first runs
        self.injected += 1
        self.end([first, second], kill=self.wait_batches([first, second], 2))

    def _reset(self, f: Fault) -> None:
        p = self.start(per_trigger=RUSH)
        self.end([p], kill=False)  # the query reads its input to the end and stops
        self.run.reset_checkpoint()
        self.run.new_input()
        self.injected += 1

    def _move(self, f: Fault) -> None:
        """An operator moves the checkpoint after a crash: the driver dies right after a
        batch's decision (before Spark's commit log), the checkpoint is copied and the query
        started from the copy, a new sink identity for the same query. The copy must be
        refused naming the sink the query ran as (a copy run on writes the batch twice or
        leaves the old decision in doubt, which the count shows); then the way out the
        message names: the copy under the old ``sinkId`` (PostgreSQL, queue), or the old
        location run to a clean stop (the end of its input, more input added after) and a
        fresh copy (Kafka, whose prefix belongs to one checkpoint, and the routing sink, whose
        Kafka sub-sink's does). Every identity's leftovers
        count as in doubt."""
        p = self.start(f"{self.run.p.decider}.after_decision@{self.run.last_batch() + 1 + f.after}")
        self.end([p], kill=False)
        if p.returncode != -9:
            return  # the input ended first: nothing decided and left behind
        self.injected += 1
        old, old_id = self.run.checkpoint, self.run.sink_id
        self.run.move_checkpoint()
        copy = self.start()
        self.end([copy], kill=False)
        log = self.run.tmp / f"driver-{self._started}.log"
        refused = copy.returncode not in (0, 3) and "PredecessorSinkError" in log.read_text(errors="replace")
        if not refused:
            self.failures.append(f"the moved checkpoint was not refused (exit {copy.returncode}; {log.name})")
        self.say(f"moved checkpoint {'refused' if refused else 'NOT refused'}; taking the way out")
        if self.run.p.sink not in ("kafka", "routing"):
            self.run.sink_id = self.run.sink_of(old, old_id)  # the copy carries the old sink on
            return
        self.run.former.append((self.run.checkpoint, None))
        self.run.checkpoint = old
        done = self.start(per_trigger=RUSH)  # to the end of its input: a clean stop
        self.end([done], kill=False)
        self.run.move_checkpoint()
        self.run.extend_input()  # for the episodes still to come

    def final(self) -> None:
        """A last clean run to the end of the input; retried twice if a fault's effect
        still makes it fail (each failure is reported). A queue's driver that went idle
        before the sink held every id (exit 3) ended too: the count shows what is missing."""
        self.run.close_input()
        for _ in range(3):
            p = self.start(per_trigger=RUSH)
            try:
                self.end([p], kill=False)
            except CampaignError:
                self.kill_all()
                raise
            if p.returncode in (0, 3):
                return
        raise CampaignError(f"{self.run.p.name}: the final run failed three times: {self.failures[-3:]}")


_ERROR = re.compile(r"([A-Za-z_.]*(Error|Exception)\b:? .*)")


def _cause(stderr: str) -> str:
    """The most telling line of a failed driver's stderr: the last error message in it."""
    found = [m.group(1) for m in _ERROR.finditer(stderr)]
    return (found[-1] if found else stderr.strip()[-300:])[:400]
