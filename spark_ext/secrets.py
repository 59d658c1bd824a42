"""Passwords given by reference: a file or an environment variable, read where a
connection is opened.

An option string is where secrets leak from (notebooks, job definitions, the query's
plan). ``passwordFile`` / ``passwordEnv`` name where the password is instead; the config
that travels to executors carries the name, never the value, and each process reads it
when it connects (so a rotated file is picked up by the next connection). The driver
reads it once at query start, so a missing file or variable fails there, naming the
option and the fix.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from spark_ext.errors import InvalidOptionError
from spark_ext.options import Option, Options


def secret_options(name: str = "password", what: str = "the password") -> tuple[Option, ...]:
    """The documented options that give ``name`` by reference."""
    return (
        Option(f"{name}File", f"A file holding {what} (its first line); read by the driver at start and "
               "by each process that connects, so ship or mount it on every executor. Recommended "
               f"over `{name}`."),
        Option(f"{name}Env", f"An environment variable holding {what}; set it on the driver and on the "
               "executors (`spark.executorEnv.<NAME>`)."),
    )


@dataclass(frozen=True)
class Secret:
    """A password: inline (option ``<name>``), or the file or variable that holds it."""

    option: str  # the option family as users spell it: password
    value: str | None = field(default=None, repr=False)
    file: str | None = None
    env: str | None = None

    def reveal(self) -> str:
        """The password, read now. Raises ``InvalidOptionError`` naming the option, the
        host and the fix (never a value) when the file or variable is not there."""
        if self.file is not None:
            try:
                with open(self.file, encoding="utf-8") as f:
                    text = f.readline().rstrip("\r\n")
            except OSError as e:
                raise InvalidOptionError(
                    f"option '{self.given}' names {self.file!r}, which cannot be read on host "
                    f"{socket.gethostname()} ({e.strerror}); ship or mount the file on every host that "
                    "connects (--files, a mounted secret) and make it readable by the job's user") from None
            if not text:
                raise InvalidOptionError(f"option '{self.given}' names {self.file!r}, whose first line "
                                         "is empty; write the password on its first line")
            return text
        if self.env is not None:
            var = os.environ.get(self.env)
            if not var:
                raise InvalidOptionError(
                    f"option '{self.given}' names environment variable {self.env!r}, which is not set on "
                    f"host {socket.gethostname()}; set it for the driver and the executors "
                    f"(spark.executorEnv.{self.env})")
            return var
        if self.value is None:  # pragma: no cover - secret() never builds one
            raise InvalidOptionError(f"no {self.option} given")
        return self.value

    @property
    def by_reference(self) -> bool:
        return self.value is None

    @property
    def given(self) -> str:
        """The option the user set: ``password``, ``passwordFile`` or ``passwordEnv``."""
        if self.file is not None:
            return f"{self.option}File"
        return f"{self.option}Env" if self.env is not None else self.option


def secret(opts: Options, name: str = "password", check: bool = True) -> Secret | None:
    """Driver, at query start: ``name``, ``nameFile`` or ``nameEnv`` (at most one), read
    once when ``check`` so a missing file or variable fails the query before it runs."""
    given = [n for n in (name, f"{name}File", f"{name}Env") if n in opts]
    if not given:
        return None
    if len(given) > 1:
        raise InvalidOptionError(f"options {', '.join(repr(g) for g in given)} each give the {name}; set one "
                                 f"(prefer '{name}File')")
    which = given[0]
    value = opts.get_str(which) or ""
    if which == name:
        out = Secret(name, value=value)
    elif not value.strip():
        raise InvalidOptionError(f"option '{which}' is empty; name the file or variable holding the {name}")
    else:
        out = Secret(name, file=value) if which.endswith("File") else Secret(name, env=value)
    if check:
        out.reveal()
    return out


def reveal(s: Secret | None) -> str | None:
    """The password now, or None when none was given."""
    return None if s is None else s.reveal()
