"""Kafka client code shared by the source and the sink: the socket layer that speaks
Kafka's wire protocol (``connection``) and the transaction / group-offset requests
(``transactions``). Neither knows about Spark."""
