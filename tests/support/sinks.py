"""The sinks the conformance suite (``tests/test_sink_conformance.py``) runs, one
``SinkCase`` each. A new sink passes the suite by adding one case here.

Each case says how to make a fresh target (a topic, a table) on its real service, which
options and columns a query writing ids into it uses, how to read back what a reader
sees as committed (``read_committed``, committed rows), what it leaves in doubt, and its
own crash points beyond the protocol's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from spark_ext import failpoints
from spark_ext.connector import SinkConnector
from spark_ext.connectors.jdbc import JdbcSink
from spark_ext.connectors.jms import JmsSink
from spark_ext.connectors.kafka import KafkaSink
from spark_ext.guarantees import Guarantee
from spark_ext.monitoring.cards import ENV as CARDS_ENV
from spark_ext.options import Options, checkpoint_sink_id
from spark_ext.routing import RoutingSink
from tests.support import jms_sink, kafka_sink, kafka_util, mysql_util, pg_util, stomp_util

# The protocol's crash points, hit by the core for every transactional sink.
PROTOCOL_POINTS = ("before_decision", "after_decision", "mid_commit", "after_done")


class SinkCase(ABC):
    """One sink under test. ``target`` is the topic or table a test writes to."""

    name: str
    connector: SinkConnector[Any]
    extra_points: tuple[str, ...] = ()  # the sink's own crash points in the driver
    task_point: str  # a task killed here has prepared its transaction (Spark retries it)
    written_point: str  # at_least_once: the tasks' rows landed, the driver not yet told
    select: tuple[str, ...]  # the columns the sink takes, from an ``id`` column

    def __init__(self, services: Any) -> None:
        self.services = services

    @abstractmethod
    def new_target(self, longest: bool = False) -> str:
        """A new topic, table or queue; ``longest``: its name as long as the service takes."""

    @abstractmethod
    def options(self, target: str) -> dict[str, str]:
        """The connector and its target: what a user sets besides the checkpoint and guarantee."""

    @abstractmethod
    def committed(self, target: str) -> list[int]:
        """The ids a reader sees as committed, sorted, duplicates kept."""

    @abstractmethod
    def schema(self) -> StructType: ...

    @abstractmethod
    def rows(self, ids: list[int]) -> pa.RecordBatch: ...

    @abstractmethod
    def sized_schema(self) -> StructType:
        """Columns carrying an id and a payload of a chosen size, apart."""

    @abstractmethod
    def sized_rows(self, ids: list[int], sizes: list[int]) -> pa.RecordBatch:
        """Rows of ``sized_schema``: each id with a payload of that many bytes."""

    @abstractmethod
    def committed_sizes(self, target: str) -> list[tuple[int, int]]:
        """(id, payload bytes) of every record a reader sees as committed, sorted."""

    def predecessor(self, checkpoint: Path) -> str:
        """How a refusal names the sink a query checkpointed at ``checkpoint`` ran as."""
        return f"ran before as sink '{checkpoint_sink_id(str(checkpoint))}'"

    #: The option naming the sink's own objects, and the longest value it takes.
    id_option, id_length = "sinkId", 64

    def long_id(self) -> str:
        """A sink id of the longest length the connector takes, unique to the test."""
        return (f"long-{uuid.uuid4().hex}-" + "x" * self.id_length)[:self.id_length]

    def in_doubt(self, checkpoint: Path, target: str) -> list[str]:
        """Transactions of the sink left open or prepared."""
        return self.in_doubt_of(checkpoint_sink_id(str(checkpoint)), target)

    @abstractmethod
    def in_doubt_of(self, sink_id: str, target: str) -> list[str]:
        """``in_doubt`` of the sink named ``sink_id`` by option ``id_option``."""

    def carry_on(self, old: Path, copy: Path) -> tuple[Path, dict[str, str]]:
        """The way out a refused copy's message names: the copy, under the old sink's id."""
        return copy, {"sinkId": checkpoint_sink_id(str(old))}

    def plan_options(self, target: str, checkpoint: Path) -> Options:
        """The options Spark hands the sink for a query checkpointed at ``checkpoint``."""
        return Options({**self.options(target), "checkpointlocation": str(checkpoint)}, "hzsink")

    def argv_options(self, target: str, **more: str) -> list[str]:
        return [f"{k}={v}" for k, v in {**self.options(target), **more}.items()]


class KafkaCase(SinkCase):
    name = "kafka"
    connector = KafkaSink()
    extra_points = ("kafka.mid_decision",)
    task_point = "kafka.after_write"
    written_point = "kafka.after_write"
    select = ("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")

    def new_target(self, longest: bool = False) -> str:
        prefix = "conf" + "x" * (234 if longest else 0)  # Kafka: 249 characters
        return kafka_util.create_topic(self.services.kafka_bootstrap, 3, prefix)

    def options(self, target: str) -> dict[str, str]:
        return {"connector": "kafka", "kafka.bootstrap.servers": self.services.kafka_bootstrap,
                "topic": target}

    def committed(self, target: str) -> list[int]:
        return sorted(int(v) for _, _, v in kafka_sink.consume(self.services.kafka_bootstrap, target))

    def predecessor(self, checkpoint: Path) -> str:
        return f"transactionalIdPrefix '{kafka_sink.prefix_of(checkpoint)}'"

    def carry_on(self, old: Path, copy: Path) -> tuple[Path, dict[str, str]]:
        return old, {}  # a prefix belongs to one checkpoint: the old location finishes the batch

    id_option, id_length = "transactionalIdPrefix", 200

    def in_doubt(self, checkpoint: Path, target: str) -> list[str]:
        return self.in_doubt_of(kafka_sink.prefix_of(checkpoint), target)

    def in_doubt_of(self, sink_id: str, target: str) -> list[str]:
        return [t for t, _, _ in kafka_sink.open_transactions(self.services.kafka_bootstrap, sink_id)]

    def schema(self) -> StructType:
        return StructType.fromJson({"type": "struct", "fields": [
            {"name": "key", "type": "string", "nullable": True, "metadata": {}},
            {"name": "value", "type": "string", "nullable": True, "metadata": {}}]})

    def rows(self, ids: list[int]) -> pa.RecordBatch:
        text = pa.array([str(i) for i in ids])
        return pa.record_batch([text, text], names=["key", "value"])

    def sized_schema(self) -> StructType:
        return self.schema()

    def sized_rows(self, ids: list[int], sizes: list[int]) -> pa.RecordBatch:
        return pa.record_batch([pa.array([str(i) for i in ids]), pa.array(["x" * n for n in sizes])],
                               names=["key", "value"])

    def committed_sizes(self, target: str) -> list[tuple[int, int]]:
        records = kafka_sink.consume(self.services.kafka_bootstrap, target)
        return sorted((int(k or b"-1"), len(v)) for _, k, v in records)


class AvroKafkaCase(KafkaCase):
    """The Kafka sink writing its values as Avro through the schema registry (valueFormat avro)."""

    name = "kafka"  # its crash points' prefix: the Kafka sink's (SINKS names it kafka_avro)
    fmt = "avro"
    select = ("CAST(id AS STRING) AS key", "named_struct('id', id, 'payload', CAST(id AS STRING)) AS value")

    def options(self, target: str) -> dict[str, str]:
        return {**super().options(target), "valueFormat": self.fmt,
                "schemaRegistry.url": self.services.registry_url}

    def _values(self, target: str) -> list[dict[str, Any]]:
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroDeserializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        de = AvroDeserializer(SchemaRegistryClient({"url": self.services.registry_url}))
        ctx = SerializationContext(target, MessageField.VALUE)
        return [de(v, ctx) for _, _, v in kafka_sink.consume(self.services.kafka_bootstrap, target)]

    def committed(self, target: str) -> list[int]:
        return sorted(int(d["id"]) for d in self._values(target))

    def schema(self) -> StructType:
        return StructType([StructField("key", StringType()), StructField("value", StructType([
            StructField("id", LongType()), StructField("payload", StringType())]))])

    def rows(self, ids: list[int]) -> pa.RecordBatch:
        return self.sized_rows(ids, [len(str(i)) for i in ids])

    def sized_schema(self) -> StructType:
        return self.schema()

    def sized_rows(self, ids: list[int], sizes: list[int]) -> pa.RecordBatch:
        value = pa.StructArray.from_arrays([pa.array(ids, pa.int64()), pa.array(["x" * n for n in sizes])],
                                           names=["id", "payload"])
        return pa.record_batch([pa.array([str(i) for i in ids]), value], names=["key", "value"])

    def committed_sizes(self, target: str) -> list[tuple[int, int]]:
        return sorted((int(d["id"]), len(d["payload"])) for d in self._values(target))


class ProtobufKafkaCase(AvroKafkaCase):
    """The same with valueFormat protobuf: values read back by protobuf's own parser, its class
    compiled from the .proto text the sink registered."""

    fmt = "protobuf"

    def _values(self, target: str) -> list[dict[str, Any]]:
        import tempfile
        from pathlib import Path

        from confluent_kafka.schema_registry import SchemaRegistryClient

        from tests.support.protobuf_util import compile_proto

        records = kafka_sink.consume(self.services.kafka_bootstrap, target)
        if not records:
            return []  # nothing written, so no schema registered either
        sr = SchemaRegistryClient({"url": self.services.registry_url})
        text = sr.get_latest_version(f"{target}-value").schema.schema_str
        assert text is not None
        with tempfile.TemporaryDirectory() as tmp:
            message = compile_proto(Path(tmp), text, "conformance").topLevelRecord
        # a header of 6 bytes: magic, schema id, the first message's index
        out = []
        for _, _, v in records:
            m = message.FromString(v[6:])
            out.append({"id": m.id, "payload": m.payload})
        return out


class JsonKafkaCase(AvroKafkaCase):
    """The same with valueFormat json-schema: values read back as JSON after the header."""

    fmt = "json-schema"

    def _values(self, target: str) -> list[dict[str, Any]]:
        import json

        return [json.loads(v[5:]) for _, _, v in kafka_sink.consume(self.services.kafka_bootstrap, target)]


class PostgresCase(SinkCase):
    name = "jdbc"
    connector = JdbcSink()
    extra_points = ("jdbc.before_prepare",)
    task_point = "jdbc.after_prepare"
    written_point = "jdbc.after_write"
    select = ("id", "v")

    @property
    def url(self) -> str:
        """What the sink (and ``spark-ext status``) connects with: the TLS-only server, the
        certificate login, ``verify-full``; so every test of this case runs over TLS."""
        return str(self.services.postgres_tls_url)

    @property
    def admin(self) -> str:
        """The tests' own look at that server (the password user, over TLS too)."""
        return str(self.services.postgres_tls_admin_url)

    def new_target(self, longest: bool = False) -> str:
        table = pg_util.table_name("conf" + "x" * (48 if longest else 0))  # PostgreSQL: 63 bytes
        pg_util.execute(self.admin, f"CREATE TABLE {table} (id bigint, v text)")
        return table

    def options(self, target: str) -> dict[str, str]:
        return {"connector": "jdbc", "url": self.url, "dbtable": target}

    def committed(self, target: str) -> list[int]:
        rows = pg_util.query(self.admin, f"SELECT id FROM {target} ORDER BY id")
        return [r[0] for r in rows]

    def in_doubt_of(self, sink_id: str, target: str) -> list[str]:
        return pg_util.prepared(self.admin, sink_id)

    def schema(self) -> StructType:
        return StructType.fromJson({"type": "struct", "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "v", "type": "string", "nullable": True, "metadata": {}}]})

    def rows(self, ids: list[int]) -> pa.RecordBatch:
        return pa.record_batch({"id": pa.array(ids, pa.int64()), "v": pa.array([f"v{i}" for i in ids])})

    def sized_schema(self) -> StructType:
        return self.schema()

    def sized_rows(self, ids: list[int], sizes: list[int]) -> pa.RecordBatch:
        return pa.record_batch({"id": pa.array(ids, pa.int64()), "v": pa.array(["x" * n for n in sizes])})

    def committed_sizes(self, target: str) -> list[tuple[int, int]]:
        rows = pg_util.query(self.admin, f"SELECT id, octet_length(v) FROM {target}")
        return sorted((int(i), int(n)) for i, n in rows)


class MariaDbCase(PostgresCase):
    """The jdbc sink on MariaDB (XA). Its connector, points and status are the jdbc sink's."""

    @property
    def url(self) -> str:
        return str(self.services.mariadb_url)

    @property
    def admin(self) -> str:
        return self.url

    def new_target(self, longest: bool = False) -> str:
        table = pg_util.table_name("conf" + "x" * (49 if longest else 0))  # MariaDB: 64 characters
        mysql_util.execute(self.admin, f"CREATE TABLE {table} (id bigint, v longtext) ENGINE=InnoDB")
        return table

    def committed(self, target: str) -> list[int]:
        return [int(r[0]) for r in mysql_util.query(self.admin, f"SELECT id FROM {target} ORDER BY id")]

    def in_doubt_of(self, sink_id: str, target: str) -> list[str]:
        return mysql_util.prepared(self.admin, sink_id)

    def committed_sizes(self, target: str) -> list[tuple[int, int]]:
        rows = mysql_util.query(self.admin, f"SELECT id, octet_length(v) FROM {target}")
        return sorted((int(i), int(n)) for i, n in rows)


class QueueCase(SinkCase):
    """The queue sink. Reading consumes, so what was read is kept (one case per test)."""

    name = "jms"
    connector = JmsSink()
    task_point = "jms.after_stage"
    written_point = "jms.after_write"
    select = ("CAST(id AS STRING) AS body",)

    def __init__(self, services: Any) -> None:
        super().__init__(services)
        self._read: dict[str, list[int]] = {}

    def new_target(self, longest: bool = False) -> str:
        return stomp_util.queue_name("conf" + "x" * (240 if longest else 0))  # Artemis sets no limit

    def options(self, target: str) -> dict[str, str]:
        """Over the broker's TLS acceptor, the CA checked: every test of this case runs over TLS
        (the tests' own reading and bookkeeping use the plain acceptor)."""
        return {"connector": "jms", **self.services.stomp_tls(), "destination": target}

    def committed(self, target: str) -> list[int]:
        got = self._read.setdefault(target, [])
        got.extend(int(b) for b in stomp_util.drain(self.services, target))
        return sorted(got)

    def in_doubt_of(self, sink_id: str, target: str) -> list[str]:
        return jms_sink.staged_tokens(self.services, sink_id)

    def schema(self) -> StructType:
        return StructType.fromJson({"type": "struct", "fields": [
            {"name": "body", "type": "string", "nullable": True, "metadata": {}}]})

    def rows(self, ids: list[int]) -> pa.RecordBatch:
        return pa.record_batch({"body": pa.array([str(i) for i in ids])})

    def sized_schema(self) -> StructType:
        return StructType.fromJson({"type": "struct", "fields": [
            {"name": "body", "type": "string", "nullable": True, "metadata": {}},
            {"name": "correlation_id", "type": "string", "nullable": True, "metadata": {}}]})

    def sized_rows(self, ids: list[int], sizes: list[int]) -> pa.RecordBatch:
        return pa.record_batch({"body": pa.array(["x" * n for n in sizes]),
                                "correlation_id": pa.array([str(i) for i in ids])})

    def committed_sizes(self, target: str) -> list[tuple[int, int]]:
        return sorted((int(h["correlation-id"]), len(b.encode()))
                      for h, b in stomp_util.drain_messages(self.services, target))


class RoutedCase(SinkCase):
    """A case whose sink is a routing sink: ids derive from the routing sink's (``rt-...``
    of the checkpoint), each sub-sink's from it (``<id>--<name>``)."""

    def routing_id(self, checkpoint: Path) -> str:
        return "rt-" + checkpoint_sink_id(str(checkpoint)).removeprefix("ck-")

    def predecessor(self, checkpoint: Path) -> str:
        return f"ran before as routing sink '{self.routing_id(checkpoint)}'"

    def carry_on(self, old: Path, copy: Path) -> tuple[Path, dict[str, str]]:
        return old, {}  # its Kafka sub-sink's prefix belongs to one checkpoint, as the Kafka sink's

    def in_doubt(self, checkpoint: Path, target: str) -> list[str]:
        return self.in_doubt_of(self.routing_id(checkpoint), target)

    # rows of a routing sink are of one schema, sized or not (``sizes=None``: the ids as text)
    def rows(self, ids: list[int]) -> pa.RecordBatch:
        return self.sized_rows(ids, None)

    def sized_schema(self) -> StructType:
        return self.schema()

    @abstractmethod
    def sized_rows(self, ids: list[int], sizes: list[int] | None) -> pa.RecordBatch: ...


class RoutingCase(RoutedCase):
    """The routing sink over a table, a topic and a queue: each id goes to one of them
    (``id % 3``), and what a reader sees as committed is all three together. A target is
    ``table|topic|queue``."""

    name = "routing"
    connector = RoutingSink()
    task_point = "jdbc.after_prepare"  # the ledger sub-sink's writer
    written_point = "jdbc.after_write"
    select = ("CASE id % 3 WHEN 0 THEN 'ledger' WHEN 1 THEN 'alerts' ELSE 'notes' END AS sink", "id",
              "CAST(id AS STRING) AS v", "CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value",
              "CAST(id AS STRING) AS body", "CAST(id AS STRING) AS correlation_id")
    id_length = 64 - len("--ledger")  # the sub-sinks' ids: <routing sink id>--<name>

    def __init__(self, services: Any) -> None:
        super().__init__(services)
        self.table, self.topic, self.queue = PostgresCase(services), KafkaCase(services), QueueCase(services)

    def new_target(self, longest: bool = False) -> str:
        return "|".join(c.new_target(longest) for c in (self.table, self.topic, self.queue))

    def options(self, target: str) -> dict[str, str]:
        table, topic, queue = target.split("|")
        out = {"connector": "routing", "sinks.ledger.columns": "id,v", "sinks.alerts.columns": "key,value",
               "sinks.notes.columns": "body,correlation_id"}
        for name, case, where in (("ledger", self.table, table), ("alerts", self.topic, topic),
                                  ("notes", self.queue, queue)):
            out.update({f"sinks.{name}.{k}": v for k, v in case.options(where).items()})
        return out

    def committed(self, target: str) -> list[int]:
        table, topic, queue = target.split("|")
        held = {0: self.table.committed(table), 1: self.topic.committed(topic),
                2: self.queue.committed(queue)}
        assert all(i % 3 == where for where, ids in held.items() for i in ids), held  # each in its own
        return sorted(i for ids in held.values() for i in ids)

    def in_doubt_of(self, sink_id: str, target: str) -> list[str]:
        table, topic, queue = target.split("|")
        return (self.table.in_doubt_of(f"{sink_id}--ledger", table)
                + self.topic.in_doubt_of(f"{sink_id}--alerts", topic)
                + self.queue.in_doubt_of(f"{sink_id}--notes", queue))

    def schema(self) -> StructType:
        return StructType([StructField(n, LongType() if n == "id" else StringType())
                           for n in ("sink", "id", "v", "key", "value", "body", "correlation_id")])

    def sized_rows(self, ids: list[int], sizes: list[int] | None) -> pa.RecordBatch:
        text = pa.array([str(i) for i in ids])
        payload = text if sizes is None else pa.array(["x" * n for n in sizes])
        return pa.record_batch({"sink": pa.array([("ledger", "alerts", "notes")[i % 3] for i in ids]),
                                "id": pa.array(ids, pa.int64()), "v": payload, "key": text, "value": payload,
                                "body": payload, "correlation_id": text})

    def committed_sizes(self, target: str) -> list[tuple[int, int]]:
        table, topic, queue = target.split("|")
        return sorted(self.table.committed_sizes(table) + self.topic.committed_sizes(topic)
                      + self.queue.committed_sizes(queue))


class DeadLettersCase(RoutedCase):
    """The Kafka sink with a dead-letter table: ids ``7 mod 40`` ask for a partition the
    topic lacks, so they are set aside. What a reader sees as committed is the topic and
    the dead letters together, each id in its own place. A target is ``topic|table``."""

    name = "routing"  # its committer, whose crash points it has
    connector = RoutingSink()
    task_point = "kafka.after_write"
    written_point = "kafka.after_write"
    select = ("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value",
              "CASE WHEN id % 40 = 7 THEN 99 END AS partition")
    id_option, id_length = "transactionalIdPrefix", 64 - len("--target")

    def __init__(self, services: Any) -> None:
        super().__init__(services)
        self.topic = KafkaCase(services)

    def new_target(self, longest: bool = False) -> str:
        return f"{self.topic.new_target(longest)}|{pg_util.table_name('conf_dead')}"

    def options(self, target: str) -> dict[str, str]:
        topic, table = target.split("|")
        return {**self.topic.options(topic), "deadLetter.connector": "jdbc",
                "deadLetter.url": self.services.postgres_url, "deadLetter.dbtable": table,
                "deadLetter.createTable": "true"}

    def plan_options(self, target: str, checkpoint: Path) -> Options:
        from spark_ext import deadletters

        return deadletters.compose(super().plan_options(target, checkpoint), self.id_option)

    def _dead(self, table: str) -> list[tuple[int, int]]:
        """(id, value bytes) of every dead letter."""
        try:
            rows = pg_util.query(self.services.postgres_url, f"SELECT row FROM {table}")
        except Exception:  # noqa: BLE001 - the table comes with the first dead letter
            return []
        docs = [json.loads(r) for (r,) in rows]
        return [(int(d["key"]), len(d["value"].encode())) for d in docs]

    def committed(self, target: str) -> list[int]:
        topic, table = target.split("|")
        kept, dead = self.topic.committed(topic), [i for i, _ in self._dead(table)]
        assert all(i % 40 != 7 for i in kept) and all(i % 40 == 7 for i in dead), (kept, dead)
        return sorted(kept + dead)

    def in_doubt_of(self, sink_id: str, target: str) -> list[str]:
        topic = target.split("|")[0]
        return (self.topic.in_doubt_of(f"{sink_id}--target", topic)
                + pg_util.prepared(self.services.postgres_url, f"{sink_id}--dead"))

    def schema(self) -> StructType:
        return StructType([StructField("key", StringType()), StructField("value", StringType()),
                           StructField("partition", IntegerType())])

    def sized_rows(self, ids: list[int], sizes: list[int] | None) -> pa.RecordBatch:
        text = pa.array([str(i) for i in ids])
        value = text if sizes is None else pa.array(["x" * n for n in sizes])
        part = pa.array([99 if i % 40 == 7 else None for i in ids], pa.int32())
        return pa.record_batch([text, value, part], names=["key", "value", "partition"])

    def committed_sizes(self, target: str) -> list[tuple[int, int]]:
        topic, table = target.split("|")
        return sorted(self.topic.committed_sizes(topic) + self._dead(table))


SINKS: dict[str, type[SinkCase]] = {"kafka": KafkaCase, "jdbc": PostgresCase, "mariadb": MariaDbCase,
                                    "jms": QueueCase, "routing": RoutingCase, "dead_letters": DeadLettersCase,
                                    "kafka_avro": AvroKafkaCase, "kafka_protobuf": ProtobufKafkaCase,
                                    "kafka_json": JsonKafkaCase}
#: Cases whose every conformance test runs in make faults (their own tests run in make test).
# MariaDB: the jdbc sink's protocol code is PostgreSQL's, which make test runs; what is
# MariaDB's own (XA, the bulk load, a killed server) is in tests/test_mariadb_sink.py.
# Avro, protobuf and JSON values: the Kafka sink's protocol, which make test runs, with the
# registry's encodings (tests/test_avro_sink.py, test_protobuf_sink.py, test_json_schema_sink.py
# in make test).
CAMPAIGN_ONLY = frozenset({"dead_letters", "mariadb", "kafka_avro", "kafka_protobuf", "kafka_json"})


# The queue source's ack points, each crashed after a committed batch, with the restart
# checked exactly once, by tests/test_jms_source.py::test_kill_9_at_each_point_in_turn_then_
# restart_every_message_exactly_once_in_postgres.
QUEUE_SOURCE_POINTS = ("jms.before_ack", "jms.mid_ack")


#: The routing sink's points (tests/test_routing_sink.py strikes each).
ROUTING_POINTS = ("routing.before_decision", "routing.after_decision", "routing.between_sinks",
                  "routing.mid_commit", "routing.after_done")


def crashed_points() -> frozenset[str]:
    """Every crash point the suite strikes outside the short campaign: the conformance
    suite's (``task:`` for a killed task), the routing sink's and the queue source's."""
    out: set[str] = set(QUEUE_SOURCE_POINTS) | set(ROUTING_POINTS)
    for case in SINKS.values():
        out.update(f"{case.name}.{p}" for p in PROTOCOL_POINTS)
        out.update((*case.extra_points, case.written_point, f"task:{case.task_point}"))
    return frozenset(out)


def plan(case: SinkCase, target: str, checkpoint: Path, guarantee: Guarantee = Guarantee.EXACTLY_ONCE,
         schema: StructType | None = None) -> Any:
    """The sink's plan for a batch (step 1), as the driver builds it."""
    return case.connector.plan(case.plan_options(target, checkpoint), schema or case.schema(), guarantee)


def run_driver(case: SinkCase, tmp: Path, target: str, failpoint: str = "-", checkpoint: str | None = None,
               **options: str) -> subprocess.CompletedProcess[str]:
    """The query of ``tests/drivers/files_to_sink.py`` (files of ``tmp / "src"``, one a batch)
    as its own driver process, killed at ``failpoint`` if given; the points that fired are
    logged to ``tmp / "struck.log"``. ``checkpoint``: another spelling of ``tmp / "ckpt"``;
    ``options["tasks"]``: tasks a batch (3), the rest the sink's options."""
    tasks = options.pop("tasks", "3")
    argv = [sys.executable, "-m", "tests.drivers.files_to_sink", str(tmp / "src"),
            checkpoint or str(tmp / "ckpt"), "|".join(case.select), failpoint,
            *case.argv_options(target, **options)]
    cards = tmp / "cards"  # the sinks' metrics cards, as a running exporter would read them
    cards.mkdir(exist_ok=True)
    env = {**os.environ, failpoints.LOG_ENV: str(tmp / "struck.log"), "SPARK_EXT_TEST_TASKS": tasks,
           CARDS_ENV: str(cards)}
    return subprocess.run(argv, start_new_session=True, capture_output=True, text=True, timeout=600, env=env)


def carded_rows(tmp: Path) -> int:
    """The rows the sinks' metrics cards of ``run_driver``'s queries count, summed over them."""
    return sum(int(json.loads(card.read_text())["rows_total"]) for card in (tmp / "cards").glob("*/*.json"))


def new_query_id() -> str:
    """A query id for a hand-driven batch: unique, as Spark's are (a UUID per checkpoint).
    The sinks look up a query's earlier identities by it, so two tests sharing one would
    look like one query moved between sinks."""
    return str(uuid.uuid4())
