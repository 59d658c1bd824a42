"""Typed values in Kafka records: Avro through a schema registry (Confluent's wire format)."""
