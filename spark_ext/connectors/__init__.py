"""spark-ext's connectors, one package each: ``kafka`` (source and sink), ``jms``
(source), ``jdbc`` (PostgreSQL sink).

Connectors depend on the core (``spark_ext``), never the other way: each registers
through entry points declared in ``pyproject.toml`` (see ``spark_ext.registry``).
"""
