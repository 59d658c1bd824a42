"""``spark-ext status <sink> ... --json`` for a test's sink, through the console script's
entry point (``cli.main``): the connection arguments the doctor takes, and checks that
the table renders and no secret is printed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from spark_ext import cli
from spark_ext.connectors.jms.doctor import PASSWORD_ENV
from spark_ext.options import checkpoint_sink_id
from tests.support import kafka_sink
from tests.support.sinks import SinkCase


def where(case: SinkCase, target: str, ckpt: Path) -> list[str]:
    """The connection arguments the doctor takes, for the sink of this checkpoint."""
    s = case.services
    if case.name == "jdbc":
        return ["--url", case.url, "--sink", checkpoint_sink_id(str(ckpt))]  # type: ignore[attr-defined]
    if case.name == "kafka":
        return ["--bootstrap", s.kafka_bootstrap, "--prefix", kafka_sink.prefix_of(ckpt), "--topic", target]
    return ["--broker", s.stomp_tls_url, "--tls-ca-file", str(s.pki / "ca.pem"), "--user", s.stomp_user,
            "--checkpoint", str(ckpt), "--destination", target]


def secrets(case: SinkCase) -> list[str]:
    s = case.services
    return [p for p in (make_url(s.postgres_url).password, make_url(s.postgres_tls_admin_url).password,
                        s.stomp_password, make_url(s.mariadb_url).password) if p]


def status(case: SinkCase, target: str, ckpt: Path, capsys, monkeypatch) -> dict[str, Any]:
    """``spark-ext status <sink> ... --json``: the one sink's entry; the table names it too."""
    monkeypatch.setenv(PASSWORD_ENV, case.services.stomp_password)
    assert cli.main(["status", case.name, *where(case, target, ckpt), "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert doc["connector"] == case.name and len(doc["sinks"]) == 1, doc
    assert cli.main(["status", case.name, *where(case, target, ckpt)]) == 0
    table = capsys.readouterr().out
    assert f"spark-ext status {case.name}" in table and doc["sinks"][0]["batch"] is not None
    for secret in secrets(case):
        assert secret not in out and secret not in table
    return dict(doc["sinks"][0])


def targets(case: SinkCase, target: str) -> set[str]:
    return {target, f"public.{target}"} if case.name == "jdbc" else {target}
