"""The routing sink's three targets for tests: a PostgreSQL table, a Kafka topic and a
queue, and what each holds."""

from __future__ import annotations

from tests.support import kafka_sink, kafka_util, pg_util, stomp_util
from tests.support.jms_sink import staged_tokens


class Targets:
    """A table, a topic and a queue, and what each holds (the queue's reads are kept:
    reading a queue consumes it)."""

    def __init__(self, services) -> None:
        self.s = services
        self.table = pg_util.table_name("routed")
        pg_util.execute(services.postgres_url, f"CREATE TABLE {self.table} (id bigint, v text)")
        self.topic = kafka_util.create_topic(services.kafka_bootstrap, 3, "routed")
        self.queue = stomp_util.queue_name("routed")
        self._read: list[int] = []

    def options(self, **more: str) -> dict[str, str]:
        s = self.s
        return {"connector": "routing",
                "sinks.ledger.connector": "jdbc", "sinks.ledger.url": s.postgres_url,
                "sinks.ledger.dbtable": self.table, "sinks.ledger.columns": "id,v",
                "sinks.alerts.connector": "kafka", "sinks.alerts.kafka.bootstrap.servers": s.kafka_bootstrap,
                "sinks.alerts.topic": self.topic, "sinks.alerts.columns": "key,value",
                "sinks.notes.connector": "jms", "sinks.notes.host": s.stomp_host,
                "sinks.notes.port": str(s.stomp_port), "sinks.notes.user": s.stomp_user,
                "sinks.notes.password": s.stomp_password, "sinks.notes.destination": self.queue,
                "sinks.notes.columns": "body", **more}

    def committed(self) -> dict[str, list[int]]:
        self._read.extend(int(b) for b in stomp_util.drain(self.s, self.queue))
        return {
            "ledger": sorted(r[0] for r in pg_util.query(self.s.postgres_url,
                                                         f"SELECT id FROM {self.table}")),
            "alerts": sorted(int(v) for _, _, v in kafka_sink.consume(self.s.kafka_bootstrap, self.topic)),
            "notes": sorted(self._read),
        }

    def in_doubt(self, routing_id: str) -> list[str]:
        sub = f"{routing_id}--"
        return (pg_util.prepared(self.s.postgres_url, sub + "ledger")
                + [t for t, _, _ in kafka_sink.open_transactions(self.s.kafka_bootstrap, sub + "alerts")]
                + staged_tokens(self.s, sub + "notes"))
