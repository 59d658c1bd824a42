"""Kafka source (``hzsource`` connector ``kafka``): Spark's built-in ``kafka`` source
options and columns, offsets in Spark's checkpoint.

- ``reader``: the connector and the micro-batch reader (planning on the driver);
- ``config``: options -> ``KafkaSourceConfig``;
- ``offsets``: offset JSON, ranges, admission control (pure);
- ``admin``: topic and offset lookups on the driver (librdkafka admin client);
- ``wire_reader`` / ``librdkafka_reader``: the two executor-side range readers.
"""

from spark_ext.connectors.kafka.source.reader import KafkaSource, KafkaStreamReader

__all__ = ["KafkaSource", "KafkaStreamReader"]
