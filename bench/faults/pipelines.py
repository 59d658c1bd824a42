"""The campaign's pipelines: their input of unique ids, what their sink holds, what it left
in doubt. Each runs as ``tests.drivers.campaign`` in its own process."""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import drain_queue, kafka_sink_prefix, read_to_end, run_sql, services_env
from spark_ext.options import checkpoint_sink_id

KAFKA_SINK_POINTS = ("kafka.before_decision", "kafka.mid_decision", "kafka.after_decision",
                     "kafka.mid_commit", "kafka.after_done")
JDBC_SINK_POINTS = ("jdbc.before_prepare", "jdbc.after_prepare", "jdbc.before_decision",
                    "jdbc.after_decision", "jdbc.mid_commit", "jdbc.after_done")
JMS_SINK_POINTS = ("jms.before_decision", "jms.after_decision", "jms.mid_commit", "jms.after_done")
ROUTING_SINK_POINTS = ("routing.before_decision", "routing.after_decision", "routing.between_sinks",
                       "routing.mid_commit", "routing.after_done", "kafka.mid_decision")
OPEN_STATES = ["Ongoing", "PrepareCommit", "PrepareAbort"]


@dataclass(frozen=True)
class Pipeline:
    """What a pipeline is made of and which faults apply to it."""

    name: str
    source: str  # kafka | jms
    sink: str  # kafka | jdbc | jms | routing (ids % 3 to PostgreSQL, Kafka and the queue)
    guarantee: str
    points: tuple[str, ...]  # driver crash points of its source and sink, each crashed once
    task_point: str  # where a task dies after preparing (Spark retries it): a failpoint name
    services: tuple[str, ...]  # what a restart fault may restart under the running query
    resets: bool = False  # a checkpoint deleted and the query restarted on new input
    options: dict[str, str] = field(default_factory=dict)
    windows: bool = False  # sliding windows of the events (spark_ext.windows) instead of the ids
    window_files: bool = False  # the windows' state in files (state_location), not Spark's state store
    tasks: int = 2  # tasks a batch (the repartition before the sink)
    database: str = "postgres"  # a jdbc sink's server: postgres | mariadb (XA)
    avro: bool = False  # values in Avro through the schema registry, some unreadable (dead letters)

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == "exactly_once"

    @property
    def decider(self) -> str:
        """Whose decision a batch's is, as its failpoints and sink id name it. An ``avro``
        pipeline's sink sets its unreadable rows aside as dead letters, which makes it a
        routing sink (the rows and the dead letters its sub-sinks)."""
        return "routing" if self.sink == "routing" or self.avro else self.sink


PIPELINES = {p.name: p for p in [
    Pipeline("kafka_to_kafka", "kafka", "kafka", "exactly_once", ("kafka.read", *KAFKA_SINK_POINTS),
             "kafka.after_write", ("kafka",), resets=True),
    Pipeline("kafka_to_jdbc", "kafka", "jdbc", "exactly_once", ("kafka.read", *JDBC_SINK_POINTS),
             "jdbc.after_prepare", ("kafka", "postgres"), resets=True),
    Pipeline("kafka_to_jdbc_upsert", "kafka", "jdbc", "at_least_once", ("jdbc.after_write",),
             "jdbc.after_write", ("kafka", "postgres"), options={"upsertKeys": "id"}),
    Pipeline("kafka_windows_to_jdbc", "kafka", "jdbc", "exactly_once",
             ("kafka.read", "windows.stage2", *JDBC_SINK_POINTS), "jdbc.after_prepare",
             ("kafka", "postgres"), windows=True),
    Pipeline("kafka_windows_files_to_jdbc", "kafka", "jdbc", "exactly_once",
             ("kafka.read", "windows.stage2", "windows.state_written", *JDBC_SINK_POINTS),
             "windows.state_written", ("kafka", "postgres"), windows=True, window_files=True),
    Pipeline("jms_to_jdbc", "jms", "jdbc", "exactly_once",
             ("jms.before_ack", "jms.mid_ack", *JDBC_SINK_POINTS), "jdbc.after_prepare",
             ("artemis", "postgres")),
    Pipeline("kafka_to_kafka_alo", "kafka", "kafka", "at_least_once", ("kafka.read", "kafka.after_write"),
             "kafka.after_write", ("kafka",)),
    Pipeline("kafka_to_jms", "kafka", "jms", "exactly_once", ("kafka.read", *JMS_SINK_POINTS),
             "jms.after_stage", ("kafka", "artemis"), resets=True),
    # A user's shape: 16 tasks a batch, so every decision names more winners than one
    # management-listed property holds (the queue sink's log is read back that way).
    Pipeline("kafka_to_jms_16tasks", "kafka", "jms", "exactly_once", ("kafka.read", *JMS_SINK_POINTS),
             "jms.after_stage", ("kafka", "artemis"), tasks=16),
    # The jdbc sink on MariaDB: XA transactions, the server restarted and frozen under it.
    Pipeline("kafka_to_mariadb", "kafka", "jdbc", "exactly_once", ("kafka.read", *JDBC_SINK_POINTS),
             "jdbc.after_prepare", ("kafka", "mariadb"), resets=True, database="mariadb"),
    # Avro values through the schema registry, every 13th unreadable: those go to the dead
    # letters (a PostgreSQL table) under each batch's decision, the rest to the table.
    Pipeline("avro_kafka_to_jdbc", "kafka", "jdbc", "exactly_once",
             ("kafka.read", "routing.before_decision", "routing.after_decision", "routing.mid_commit",
              "routing.after_done", "jdbc.after_prepare"), "jdbc.after_prepare",
             ("kafka", "postgres"), avro=True),  # the local registry keeps schemas in memory: no restart
    # One query, three systems, one decision a batch (the routing sink).
    Pipeline("kafka_to_routing", "kafka", "routing", "exactly_once", ("kafka.read", *ROUTING_SINK_POINTS),
             "jdbc.after_prepare", ("kafka", "postgres", "artemis"), resets=True),
]}

# The pipelines the short campaign runs (make faults, first). kafka_to_kafka_alo and
# kafka_to_jms run only in the seeded campaign: the sink conformance suite kills the
# at_least_once Kafka sink after its rows landed and the queue sink at each of its points,
# and kafka_to_kafka crashes the Kafka source. kafka_to_jdbc too: every fault of its short
# plan applies to another pipeline writing to PostgreSQL exactly_once (short_plan deals
# them there), and the suite runs Kafka -> PostgreSQL exactly_once elsewhere (spark-
# submit, Spark Connect). jms_to_jdbc likewise: its one fault (jdbc.after_prepare) goes to
# another PostgreSQL pipeline, and the queue source's own suite kills Artemis ->
# PostgreSQL at each of its points in turn. kafka_to_jms_16tasks as well: the conformance
# suite kills each sink after a decision at 16 tasks a batch (and at 200 in make faults).
# kafka_to_routing: the suite kills the routing sink at each of its points
# (tests/test_routing_sink.py); its seeded campaign runs with the others. kafka_to_mariadb:
# the conformance suite kills the jdbc sink on MariaDB at each point (in make faults).
SHORT_PIPELINES = [name for name in PIPELINES
                   if name not in ("kafka_to_kafka_alo", "kafka_to_jms", "kafka_to_jdbc", "jms_to_jdbc",
                                   "kafka_to_jms_16tasks", "kafka_to_routing", "kafka_to_mariadb")]


class PipelineRun:
    """One campaign's live state of a pipeline: its checkpoint, inputs and sink."""

    def __init__(self, p: Pipeline, tmp: Path, ids_per_input: int, per_trigger: int) -> None:
        self.p, self.tmp = p, tmp
        self.env = services_env()
        self.checkpoint = tmp / "ckpt"
        self.ids_per_input, self.per_trigger = ids_per_input, per_trigger
        self.expected: set[str] = set()
        self.tag = uuid.uuid4().hex[:8]
        self.out = f"faults_{p.name}_{self.tag}"
        self.input = ""
        self._next_id = 0
        self.read_before: set[str] = set()  # what inputs before a checkpoint reset held (all read)
        self.sink_id: str | None = None  # option sinkId, once a moved checkpoint carries the old sink on
        self.former: list[tuple[Path, str | None]] = []  # checkpoints moved away from, with their sinkId
        if p.sink in ("kafka", "routing"):
            self._create_topic(self.out, 3)
        self.new_input()

    # --- input ------------------------------------------------------------------------

    def new_input(self) -> None:
        """A fresh input (topic or queue) of ``ids_per_input`` new unique ids."""
        self.read_before = set(self.expected)  # a reset reads its input to the end first
        self._input_ids: list[int] = []  # the current input's, for its windows as a whole
        self.input = f"faults-in-{self.tag}-{self._next_id + self.ids_per_input}"
        if self.p.source == "kafka":
            self._create_topic(self.input, 3)
        self.extend_input()

    def extend_input(self) -> None:
        """``ids_per_input`` new unique ids at the end of the current input."""
        ids = [str(i) for i in range(self._next_id, self._next_id + self.ids_per_input)]
        self._next_id += self.ids_per_input
        if self.p.source == "kafka":
            from kafka import KafkaProducer

            prod = KafkaProducer(bootstrap_servers=self.env["KAFKA_BOOTSTRAP_SERVERS"], acks="all",
                                 linger_ms=5)
            for i in ids:
                if self.p.avro:
                    prod.send(self.input, key=i.encode(), value=self._avro(int(i)))
                    continue
                value = ",".join(map(str, event(int(i)))) if self.p.windows else f"v{i}"
                prod.send(self.input, key=i.encode(), value=value.encode())
            prod.flush()
            prod.close()
        else:
            import stomp

            conn = stomp.Connection12([(self.env["STOMP_HOST"], int(self.env["STOMP_PORT"]))],
                                      heartbeats=(0, 0))
            conn.connect(self.env["STOMP_USER"], self.env["STOMP_PASSWORD"], wait=True)
            for i in ids:
                conn.send(f"/queue/{self.input}", i, headers={"persistent": "true"})
            conn.disconnect(receipt="bye")  # waits for the receipt: the broker has every message
        if self.p.windows:
            # Over the whole input: a window may hold events from before and after an extension.
            self._input_ids += [int(i) for i in ids]
            self.expected = self.read_before | expected_windows(self._input_ids)
        else:
            self.expected |= set(ids)

    def _avro(self, i: int) -> bytes:
        """Id ``i`` as an Avro record in the registry's wire format; every 13th cannot be read
        (its id is one the registry never gave)."""
        import io

        import fastavro

        if not hasattr(self, "_schema_id"):
            from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

            sr = SchemaRegistryClient({"url": self.env["SCHEMA_REGISTRY_URL"]})
            self._schema_id = sr.register_schema(f"{self.input}-value", Schema(json.dumps(AVRO_ROW), "AVRO"))
        unknown = _unreadable(str(i))
        buf = io.BytesIO()
        buf.write(b"\0" + (0x7FFFFF01 if unknown else self._schema_id).to_bytes(4, "big"))
        fastavro.schemaless_writer(buf, fastavro.parse_schema(AVRO_ROW), {"id": i, "v": f"v{i}"})
        return buf.getvalue()

    def close_input(self) -> None:
        """Windows: a far-future event on every partition, so the watermark passes every
        window of the real events before the last run ends."""
        if not self.p.windows:
            return
        from kafka import KafkaProducer

        prod = KafkaProducer(bootstrap_servers=self.env["KAFKA_BOOTSTRAP_SERVERS"], acks="all")
        far = T0 + 10 * self._next_id + 100_000
        for part in range(3):
            prod.send(self.input, key=b"flush", value=f"~flush,{far},0".encode(), partition=part)
        prod.flush()
        prod.close()

    def reset_checkpoint(self) -> None:
        shutil.rmtree(self.checkpoint, ignore_errors=True)

    def move_checkpoint(self) -> None:
        """Copy the checkpoint to a new path and run from there on (the old one stays, as an
        operator's copy leaves it)."""
        self.former.append((self.checkpoint, self.sink_id))
        copy = self.tmp / f"ckpt-moved-{len(self.former)}"
        shutil.copytree(self.checkpoint, copy)
        self.checkpoint = copy

    def sink_of(self, checkpoint: Path, sink_id: str | None) -> str:
        """The PostgreSQL / queue / routing sink's id: option sinkId, else derived from the
        checkpoint."""
        derived = checkpoint_sink_id(str(checkpoint))
        return sink_id or ("rt-" + derived.removeprefix("ck-") if self.p.decider == "routing" else derived)

    def _create_topic(self, name: str, partitions: int) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.env["KAFKA_BOOTSTRAP_SERVERS"])
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            admin.close()

    # --- the driver ---------------------------------------------------------------------

    def argv(self, failpoint: str = "-", per_trigger: int | None = None) -> list[str]:
        """The driver's command line; ``per_trigger`` overrides the batch size (a run
        meant to read the rest of the input quickly)."""
        e = self.env
        spec: dict[str, Any] = {
            "name": self.p.name, "source": self.p.source, "sink": self.p.sink,
            "checkpoint": str(self.checkpoint), "per_trigger": per_trigger or self.per_trigger,
            "bootstrap": e["KAFKA_BOOTSTRAP_SERVERS"], "topic": self.input, "queue": f"/queue/{self.input}",
            "stomp_host": e["STOMP_HOST"], "stomp_port": e["STOMP_PORT"], "stomp_user": e["STOMP_USER"],
            "stomp_password": e["STOMP_PASSWORD"], "url": self.db_url, "out": self.out,
            "expected": len(self.expected), "idle_s": 45, "windows": self.p.windows, "tasks": self.p.tasks,
            "state_location": str(self.tmp / "window-state") if self.p.window_files else None,
            "avro": self.p.avro, "registry": e.get("SCHEMA_REGISTRY_URL"), "dead": f"{self.out}_dead",
            "options": {"guarantee": self.p.guarantee, **self.p.options,
                        **({"createTable": "true"} if self.p.sink == "jdbc" else {}),
                        **({"sinkId": self.sink_id} if self.sink_id else {})},
        }
        return [sys.executable, "-m", "tests.drivers.campaign", json.dumps(spec), failpoint]

    @property
    def db_url(self) -> str:
        """The jdbc sink's database (the routing sink's ledger, the windows' table)."""
        return self.env["MARIADB_URL"] if self.p.database == "mariadb" else self.env["POSTGRES_URL"]

    def last_batch(self) -> int:
        """The newest batch Spark's commit log holds (-1: none)."""
        commits = self.checkpoint / "commits"
        ids = [int(f.name) for f in commits.iterdir() if f.name.isdigit()] if commits.is_dir() else []
        return max(ids, default=-1)

    # --- what was due when a campaign broke off -----------------------------------------

    def due(self) -> set[str]:
        """What the sink must hold although the campaign broke off: what the batches Spark
        committed had read (a queue: what was acknowledged, so gone from the input queue),
        never input no run got to read. Windows: those the committed batches' watermark
        had passed."""
        if self.p.source == "jms":
            left = set(drain_queue(self.env, f"/queue/{self.input}"))
            return {i for i in self.expected if i not in left}
        batch = self.last_batch()
        if self.p.windows:
            # emitted in the batch after the one whose events moved the watermark past them
            wm = _watermark(self._read_below(self._ends(batch - 1)))
            return {w for w in self.expected if int(w.split("|")[2]) <= wm}
        return self.read_before | {i for ids in self._read_below(self._ends(batch)).values() for i in ids}

    def _ends(self, batch: int) -> dict[int, int]:
        """The current input's end offsets per partition as Spark's offset log holds them
        for ``batch`` (nothing read before batch 0)."""
        path = self.checkpoint / "offsets" / str(batch)
        if batch < 0 or not path.exists():
            return {}
        doc = json.loads(path.read_text().splitlines()[2])
        return {int(p): int(o) for p, o in doc.get(self.input, {}).items()}

    def _read_below(self, ends: dict[int, int]) -> dict[int, list[str]]:
        """The current input's ids below ``ends``, per partition, in offset order."""
        if not ends:
            return {}
        from kafka import KafkaConsumer

        c = KafkaConsumer(bootstrap_servers=self.env["KAFKA_BOOTSTRAP_SERVERS"], enable_auto_commit=False)
        try:
            records = read_to_end(c, self.input)
        finally:
            c.close()
        out: dict[int, list[str]] = {p: [] for p in ends}
        for r in sorted(records, key=lambda r: (r.partition, r.offset)):
            if r.offset < ends.get(r.partition, 0) and r.key != b"flush":
                out[r.partition].append(r.key.decode())
        return out

    # --- what the sink holds ------------------------------------------------------------

    def committed(self) -> list[str]:
        """Every id the sink made visible (read_committed for Kafka), with repeats."""
        if self.p.windows:
            rows = run_sql(self.env["POSTGRES_URL"],
                           "SELECT account, extract(epoch FROM window_start)::bigint, "
                           f"extract(epoch FROM window_end)::bigint, n, total, top FROM {self.out} "
                           "WHERE account <> '~flush'")
            return ["|".join(map(str, r)) for r in rows]
        if self.p.sink == "routing":  # every id in the system its id % 3 names, nowhere else
            held = {0: self._table_ids(), 1: _read_committed(self.env["KAFKA_BOOTSTRAP_SERVERS"], self.out),
                    2: drain_queue(self.env, f"/queue/{self.out}")}
            return [i for where, ids in held.items() for i in ids if int(i) % 3 == where]
        if self.p.sink == "jdbc" and self.p.avro:  # the unreadable ids in the dead letters, the rest not
            return ([i for i in self._table_ids() if not _unreadable(i)]
                    + [i for i in self._dead_ids() if _unreadable(i)])
        if self.p.sink == "jdbc":
            return self._table_ids()
        if self.p.sink == "jms":
            return drain_queue(self.env, f"/queue/{self.out}")
        return _read_committed(self.env["KAFKA_BOOTSTRAP_SERVERS"], self.out)

    def _table_ids(self) -> list[str]:
        rows = run_sql(self.db_url, f"SELECT id, v FROM {self.out}")
        return [str(i) for i, v in rows if v == f"v{i}"]  # a wrong value counts as missing

    def _dead_ids(self) -> list[str]:
        """The ids of the dead letters that are unreadable records (their raw key)."""
        import base64

        try:
            rows = run_sql(self.db_url, f"SELECT row FROM {self.out}_dead")
        except Exception:  # noqa: BLE001 - the table comes with the first batch that had one
            return []
        return [base64.b64decode(json.loads(r)["key"]).decode() for (r,) in rows]

    def in_doubt(self) -> int:
        """Prepared PostgreSQL transactions, open Kafka transactions, or messages left in the
        queue sink's staging queue, of the sink and of every identity a moved checkpoint had."""
        identities = [*self.former, (self.checkpoint, self.sink_id)]
        sinks = {self.sink_of(c, s) for c, s in identities}
        if self.p.sink == "routing":  # its sub-sinks' ids: <routing id>--<name>
            return sum(self._in_doubt_of(kind, f"{rid}--{name}") for rid in sinks
                       for kind, name in (("jdbc", "ledger"), ("kafka", "alerts"), ("jms", "notes")))
        if self.p.avro:  # dead letters: the sink runs as a routing sink (target, dead)
            rids = {s or "rt-" + checkpoint_sink_id(str(c)).removeprefix("ck-") for c, s in identities}
            return sum(self._in_doubt_of("jdbc", f"{rid}--{name}") for rid in rids
                       for name in ("target", "dead"))
        if self.p.sink == "kafka":
            prefixes = {kafka_sink_prefix(c) for c, _ in identities}
            return sum(self._in_doubt_of("kafka", prefix) for prefix in prefixes)
        return sum(self._in_doubt_of(self.p.sink, sink) for sink in sinks)

    def _in_doubt_of(self, kind: str, sink: str) -> int:
        """What sink ``sink`` (for Kafka: its prefix) of connector ``kind`` left in doubt."""
        if kind == "jms":
            return _staged(self.env, sink)
        if kind == "jdbc" and self.p.database == "mariadb":
            from sqlalchemy.engine import make_url

            from spark_ext.connectors.jdbc.mariadb.transactions import connect, format_id, prepared_gids

            url = make_url(self.db_url)
            conn = connect(url)
            try:
                return len(prepared_gids(conn, sink, format_id(url.database or "")))
            finally:
                conn.close()
        if kind == "jdbc":
            return int(run_sql(self.env["POSTGRES_URL"], "SELECT count(*) FROM pg_prepared_xacts "
                               f"WHERE gid LIKE 'sx:{sink}:%'")[0][0])
        from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient

        client = KafkaTxnClient(self.env["KAFKA_BOOTSTRAP_SERVERS"])
        try:
            return len(client.list_transactions(sink.replace(".", r"\.") + "-.*", OPEN_STATES))
        finally:
            client.close()

    def cleanup(self) -> None:
        if self.p.sink == "jdbc":
            run_sql(self.db_url, f"DROP TABLE IF EXISTS {self.out}")
            run_sql(self.db_url, f"DROP TABLE IF EXISTS {self.out}_dead")


T0 = 1_700_000_000  # the first event's time (seconds), on a window boundary
def _unreadable(i: str) -> bool:
    """avro_kafka_to_jdbc: is id ``i`` written with a schema id the registry never gave?"""
    return int(i) % 13 == 5


AVRO_ROW = {"type": "record", "name": "Row", "namespace": "faults", "fields": [
    {"name": "id", "type": "long"}, {"name": "v", "type": "string"}]}


def event(i: int) -> tuple[str, float, int]:
    """Event ``i`` of a windows pipeline: (account, time in seconds, amount), in time order."""
    return f"a{i % 7}", T0 + i * 0.25, i % 100


def expected_windows(ids: list[int]) -> set[str]:
    """The 30 s / 10 s sliding windows a batch computation gives for events ``ids``, as
    ``account|start|end|n|total|top`` (what ``PipelineRun.committed`` reads back)."""
    acc: dict[tuple[str, int], list[int]] = {}
    for i in ids:
        account, ts, amount = event(i)
        first = int(ts // 10) * 10
        for start in (first - 20, first - 10, first):
            a = acc.setdefault((account, start), [0, 0, -1])
            a[0], a[1], a[2] = a[0] + 1, a[1] + amount, max(a[2], amount)
    return {f"{k}|{s}|{s + 30}|{n}|{t}|{m}" for (k, s), (n, t, m) in acc.items()}


def _watermark(read: dict[int, list[str]]) -> float:
    """The coalesced watermark after reading ``read``: the least, over the input's
    partitions, of the newest event time read from it (no lateness; -inf while a
    partition has given nothing)."""
    if not read or not all(read.values()):
        return float("-inf")
    return min(max(event(int(i))[1] for i in ids) for ids in read.values())


def count(items: list[str], expected: set[str]) -> tuple[int, int]:
    """(lost, duplicated) of ``items`` against ``expected``; an item is an id, or a window
    whose first three fields (key, start, end) identify it."""
    seen = Counter(_identity(x) for x in items)
    present = set(items)
    return len(expected - present), sum(n - 1 for n in seen.values() if n > 1)


def _identity(item: str) -> str:
    return "|".join(item.split("|")[:3])


def _read_committed(bootstrap: str, topic: str) -> list[str]:
    from kafka import KafkaConsumer

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed")
    try:
        return [r.value.decode() for r in read_to_end(c, topic)]
    finally:
        c.close()


def _staged(env: dict[str, str], sink_id: str) -> int:
    from spark_ext.connectors.jms.session import BrokerSession, QueueMissingError
    from spark_ext.connectors.jms.sink.config import QUEUE_PREFIX

    with BrokerSession(env["STOMP_HOST"], int(env["STOMP_PORT"]), env["STOMP_USER"], env["STOMP_PASSWORD"],
                       30.0) as s:
        try:
            return int(s.attribute(f"queue.{QUEUE_PREFIX}{sink_id}.staging", "MessageCount"))
        except QueueMissingError:  # never staged anything
            return 0
