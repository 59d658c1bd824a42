"""The jdbc sink's MariaDB / MySQL dialect (a ``mysql+pymysql`` or ``jdbc:mariadb:`` /
``jdbc:mysql:`` URL), over PyMySQL (the ``mysql`` extra):

- ``transactions``: connections, XA transaction ids, the queries that find and finish
  in-doubt transactions;
- ``tables``: the server and the target checked, the bookkeeping tables, the SQL;
- ``writer``: executor side, one XA transaction per task;
- ``committer``: driver side, the PostgreSQL committer's protocol over XA.

What both dialects share (transaction names, the commit message, the decision rules)
stays in ``jdbc.transactions`` and ``jdbc.committer``.
"""
