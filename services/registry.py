"""The local schema registry: Apicurio Registry, speaking Confluent's REST API.

Apicurio's Quarkus app is published on Maven Central as one tarball (runner jar plus
lib/), so no container is needed. Schemas live in its memory: a restart forgets them,
as tests expect of a fresh service. Confluent's default compatibility (BACKWARD) is set
at every start, where Apicurio's own default is none.
"""

from __future__ import annotations

import json
import tarfile
import urllib.request
from pathlib import Path

from services.common import (
    CACHE,
    HOST,
    LOCAL,
    REGISTRY_PORT,
    REGISTRY_VERSION,
    ServiceError,
    _java,
    _port_open,
    _spawn,
    _wait,
    log,
)

#: Confluent's API, the one clients (confluent-kafka's, Spark jobs', ours) speak.
PATH = "/apis/ccompat/v7"
URL = f"http://{HOST}:{REGISTRY_PORT}{PATH}"


def registry_home() -> Path:
    home = CACHE / f"apicurio-registry-app-{REGISTRY_VERSION}"
    jar = home / f"apicurio-registry-app-{REGISTRY_VERSION}-runner.jar"
    if not jar.exists():
        from services.common import _mvn

        m2 = Path.home() / ".m2" / "repository" / "io" / "apicurio" / "apicurio-registry-app"
        m2 = m2 / REGISTRY_VERSION
        tgz = m2 / f"apicurio-registry-app-{REGISTRY_VERSION}-all.tar.gz"
        if not tgz.exists():
            log(f"resolving Apicurio Registry {REGISTRY_VERSION} from Maven Central")
            # dependency:get, not :copy: the latter resolves a parent POM Central does not serve.
            _mvn("dependency:get",
                 f"-Dartifact=io.apicurio:apicurio-registry-app:{REGISTRY_VERSION}:tar.gz:all",
                 "-Dtransitive=false")
        home.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tgz) as tf:
            tf.extractall(home, filter="tar")
    return home


def _get(path: str, timeout: float = 5.0) -> object:
    with urllib.request.urlopen(f"{URL}{path}", timeout=timeout) as r:
        return json.loads(r.read() or b"null")


def _put(path: str, body: dict[str, object]) -> object:
    req = urllib.request.Request(f"{URL}{path}", data=json.dumps(body).encode(), method="PUT",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5.0) as r:
        return json.loads(r.read() or b"null")


def ready() -> bool:
    """Confluent's API answers: the subject list and the global compatibility."""
    if not _port_open(REGISTRY_PORT):
        return False
    return isinstance(_get("/subjects"), list) and "compatibilityLevel" in _get("/config")  # type: ignore[operator]


def settings() -> list[str]:
    level = _get("/config")
    if isinstance(level, dict) and level.get("compatibilityLevel") != "BACKWARD":
        return [f"global compatibility is {level.get('compatibilityLevel')}, not BACKWARD "
                "(Confluent's default)"]
    return []


def registry_up() -> None:
    home = registry_home()
    jar = home / f"apicurio-registry-app-{REGISTRY_VERSION}-runner.jar"
    pid = _spawn("registry", [
        _java(), "-Xmx384m", f"-Dquarkus.http.host={HOST}", f"-Dquarkus.http.port={REGISTRY_PORT}",
        "-Dquarkus.log.level=WARN", "-jar", str(jar)], cwd=LOCAL)
    log(f"starting the schema registry (pid {pid})")
    _ready_registry(pid)


def _ready_registry(pid: int) -> None:
    _wait("registry", ready, pid, LOCAL / "logs" / "registry.log")
    _put("/config", {"compatibility": "BACKWARD"})
    if settings():
        raise ServiceError(f"the schema registry kept its compatibility: {settings()}")
    log(f"schema registry ready at {URL}")
