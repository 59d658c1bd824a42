"""``make soak [MINUTES=60]``: the payments job for an hour at a steady rate, with crashes,
sampled every minute, then verified.

The job is ``make demo``'s (``examples/payments/job.py``: Kafka in; a PostgreSQL ledger and
windows, Kafka alerts and queue notices out, one routing sink, ``exactly_once``), launched
with ``spark-submit`` on ``local[2,4]`` (a failed task is retried, as on a cluster). Payments
go to Kafka at ``--rate`` for ``--minutes``; the notices queue is read while the job runs, as
the account holders' service would (an hour of unread notices outgrew the broker's 1 GB
heap), and the verification counts what was read. Faults:

- ``kill -9`` of the job's whole process group at each of ``--job-kill-at`` minutes
  (default 4: inside the warm-up, so the run from minute 10 to the end is one JVM whose
  growth the figures show), then the job is started again from its checkpoint;
- ``kill -9`` of an executor's Python worker running a task every ``--worker-kill-every``
  minutes from minute 11 until a minute before the end's p99 window (the task is retried;
  the driver lives on).

Every ``--sample-s`` (default 60) one CSV row (``samples.csv`` in the run's directory,
``COLUMNS``): resident memory of the JVM and of every Python process, the JVM's heap in
use (``jstat``; the heap is taken whole at start, ``--driver-memory``, so that resident
memory shows what the job holds and not what the JVM has reserved), their open
descriptors, the checkpoint's size and files, Spark's local directory, the sinks'
bookkeeping rows and staged queue messages, and the batches' duration and the payments'
visibility (sent to the ledger) p50/p99 over the minute. At the end: a chart
(``soak.png``), ``batches.csv`` (every batch), the verification (every payment once in
every output, nothing in doubt; then the run's topics are deleted) and one line other
tools read::

    SOAK minutes=<n> batches=<n> rss_mb_10min=<n> rss_mb_end=<n> fds_10min=<n> fds_end=<n>
    p99_ms_10min=<n> p99_ms_end=<n> duplicates=<n> lost=<n> in_doubt=<n>

``rss_mb``: the job's whole tree; ``p99_ms``: batch duration (``triggerExecution``) p99
over the ``--window`` minutes before the 10-minute mark and before the end. A line
``SOAK_GOALS`` says whether memory and descriptors stayed within 10% of their 10-minute
values and the p99 within 20%; the exit status is 1 when a goal or the verification
failed.
"""
