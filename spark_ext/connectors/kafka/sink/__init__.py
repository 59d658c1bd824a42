"""Kafka sink (``hzsink`` connector ``kafka``): two-phase commit over Kafka transactions.

- ``connector``: options, checks against the broker, the plan (``spark_ext.commit`` step 1);
- ``config``: options -> ``KafkaSinkConfig``;
- ``records``: Arrow rows -> Kafka record batches, Kafka's default partitioner;
- ``writer``: executor side, one prepared transaction per task (step 3);
- ``committer``: driver side, decision record, commit, recovery (steps 1, 4, 5).
"""

from spark_ext.connectors.kafka.sink.connector import KafkaSink

__all__ = ["KafkaSink"]
