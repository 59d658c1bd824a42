"""The suite's order, so that ``make test``'s pytest-xdist workers finish together.

``--dist worksteal`` hands the first worker the first half of the collection and the
second worker the rest, and an idle worker steals from the end of a busy one's queue. In
collection order a three-minute test can start last and run alone while the other worker
has nothing left: the suite's wall time is then its slowest worker's. Here the slow tests
(``SLOW``, seconds measured by ``--durations``) are dealt greedily to the lighter half,
each half runs its slowest first, and the many short tests fill the ends, where stealing
evens out what is left. An unknown test weighs ``DEFAULT_S``; a stale figure only costs
balance, never correctness.

The deal is made over the whole collection, before ``-m`` deselects (conftest's hook runs
before pytest's own), and worksteal splits what is left, so under ``make test``'s markers
the halves the workers get are not quite the dealt ones: the first worker's share opens
with some slow tests and ends with others. Dealing after the deselection (the hook made
``trylast``) was tried on 2026-12-06 and showed no gain: five fresh-clone CI runs that day
took 15:12, 15:56, 15:59, 17:10 and 17:55 for the parallel part, slower with each run
whichever deal it had, so the deal was left where it was.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

DEFAULT_S = 2.0

# Test function -> seconds per case, from `make test --durations` on 2 cores (2026-12-04,
# a fresh clone at 05cd413; where a test runs several cases, their median).
SLOW: dict[str, float] = {
    "test_kill_9_at_each_step_in_turn_and_a_retried_task_are_exactly_once": 45,  # key steps, 2026-12-06
    "test_kill_9_at_each_point_in_turn_then_restart_every_message_exactly_once_in_postgres": 95,
    "test_exactly_once_at_production_shapes": 62,
    "test_wheel_with_the_kafka_extra_runs_kafka_and_names_the_extra_for_jdbc": 60,
    "test_kill_9_in_a_foreach_batch_function_lands_each_id_once_in_every_system": 51,
    "test_a_killed_and_restarted_kafka_to_postgresql_query_seen_through_its_exporter_and_sidecars": 49,
    "test_kill_9_at_the_routing_steps_leaves_every_system_exactly_once": 44,
    "test_no_secret_reaches_the_event_log_the_ui_a_checkpoint_a_log_or_an_error": 42,
    "test_the_commit_worker_killed_after_the_decision_leaves_the_batch_to_the_restart": 39,
    "test_at_least_once_replay_with_other_partitions_loses_nothing": 36,
    "test_a_replayed_batch_and_a_retried_task_give_the_windows_of_one_uninterrupted_run": 36,
    "test_queue_source_every_trigger_writes_every_message_once": 20,
    "test_kafka_source_every_trigger_reads_every_record_once": 15,
    "test_kill_9_with_dead_letters_leaves_every_row_in_one_place_once": 33,
    "test_at_least_once_loses_nothing_when_the_driver_dies_after_the_rows_landed": 30,
    "test_an_idle_query_acknowledges_what_committed_within_a_trigger": 32,
    "test_a_lagging_kafka_partition_is_not_dropped_as_late": 27,
    "test_available_now_runs_acknowledge_what_they_committed_and_drain_the_queue": 24,
    "test_spark_submit_outside_the_repository_finds_hzsource_and_hzsink": 24,
    "test_exactly_once_writes_inside_foreach_batch_through_spark_connect": 23,
    "test_a_campaign_broken_off_counts_only_what_was_due": 22,
    "test_kafka_to_postgres_exactly_once_through_spark_connect": 24,
    "test_batch_reads_return_the_rows_spark_returns_for_each_time_option": 19,
    "test_a_restart_with_another_window_definition_is_refused_and_the_old_one_resumes": 35,
    "test_a_cut_network_fails_a_write_in_about_half_a_minute_instead_of_hanging": 31,
    "test_upsert_at_least_once_replays_converge_to_the_exactly_once_state": 31,
    "test_kill_9_of_the_driver_then_restart_is_exactly_once_over_sasl_ssl": 33,
    "test_a_poison_message_fails_every_start_and_is_never_acknowledged": 37,
    "test_streaming_equals_spark_streaming_with_a_watermark": 12,
    "test_windows_with_their_state_in_files_through_spark_connect": 10,
}


def weight(name: str) -> float:
    """Seconds ``name`` (a test id, parameters and all) is expected to take."""
    return SLOW.get(name.split("[", 1)[0], DEFAULT_S)


def balanced(items: Sequence[T], names: Sequence[str], workers: int) -> list[T]:
    """``items`` reordered: ``workers`` contiguous chunks of worksteal's sizes, of about
    equal expected time, each slowest first. Deterministic (every worker must collect the
    same order)."""
    n = len(items)
    caps, left = [], n
    for i in range(workers):  # worksteal's first split: pending // nodes remaining
        caps.append(left // (workers - i))
        left -= caps[-1]
    chunks: list[list[int]] = [[] for _ in range(workers)]
    totals = [0.0] * workers
    for i in sorted(range(n), key=lambda i: (-weight(names[i]), i)):
        open_ = [c for c in range(workers) if len(chunks[c]) < caps[c]]
        c = min(open_, key=lambda c: (totals[c], c))
        chunks[c].append(i)
        totals[c] += weight(names[i])
    return [items[i] for chunk in chunks for i in chunk]


def xdist_workers() -> int:
    """How many workers this pytest run has (1 without xdist)."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
