"""Typed, validated access to data source options.

Runs on the driver at query start (``DataSource.schema`` / ``streamReader`` /
``streamWriter``); the parsed values are plain Python and travel to executors pickled.
Spark hands options over lower-cased, so every name here is lower-case.
"""

from __future__ import annotations

import difflib
import hashlib
import os.path
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from spark_ext.errors import InvalidOptionError, MissingOptionError, UnknownOptionError

#: Options Spark itself adds to a source's or sink's option map.
SPARK_OPTIONS = frozenset({"path", "checkpointlocation", "queryname", "connector", "guarantee"})

_SECRET_HINTS = ("password", "secret", "token", "sasl.jaas.config", "credential", "key.password")

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def is_secret(name: str) -> bool:
    """True for option names whose values must never appear in logs or errors."""
    return any(h in name.lower() for h in _SECRET_HINTS)


def redact(options: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``options`` safe to log: secret values replaced by ``***``."""
    return {k: ("***" if is_secret(k) else v) for k, v in options.items()}


def checkpoint_identity(location: str) -> str:
    """The checkpoint location as one canonical string, so one checkpoint is one sink.

    Spark qualifies the path itself, so ``/c``, ``/c/``, ``file:/c`` and ``file:///c``
    name the same checkpoint; sinks derive their ids from this form. A path without a
    scheme is taken as local (as with Spark's default file system); ``hdfs://nn/c`` and
    ``/c`` stay different even where ``nn`` is the default file system.
    """
    parts = urlsplit(location.strip())
    if len(parts.scheme) <= 1 or parts.scheme == "file":  # none, a Windows drive, or file:
        path = parts.path if parts.scheme == "file" else location.strip()
        return "file:" + os.path.normpath(os.path.abspath(path))
    path = posixpath.normpath(parts.path or "/")
    return f"{parts.scheme.lower()}://{parts.netloc}{'' if path == '.' else path}"



def checkpoint_sink_id(checkpoint_location: str) -> str:
    """The sink id derived from a query's checkpoint location (what ``doctor`` lists)."""
    return "ck-" + hashlib.sha256(checkpoint_identity(checkpoint_location).encode()).hexdigest()[:16]


_SINK_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def stable_sink_id(opts: Options, connector: str, exactly_once: bool, what_for: str) -> str | None:
    """A sink's stable name: option ``sinkId``, else derived from the checkpoint location.
    None when neither is set and the guarantee is weaker (the caller picks a fallback);
    exactly-once needs one, ``what_for`` says why."""
    given = opts.get_str("sinkid")
    if given is not None:
        if not _SINK_ID.match(given):
            raise InvalidOptionError(
                f"option 'sinkId' is {given!r}; use 1-64 letters, digits, '_', '-' or '.'")
        return given
    ckpt = opts.checkpoint()
    if ckpt is not None:
        return checkpoint_sink_id(ckpt)
    if exactly_once:
        raise InvalidOptionError(
            f"hzsink connector {connector!r} with guarantee exactly_once needs a stable sink id {what_for}: "
            "set .option('checkpointLocation', ...) on writeStream, or .option('sinkId', ...)")
    return None

#: Joins a routing sink's id and a sub-sink's name into the sub-sink's id.
SEPARATOR = "--"


def is_sibling(own: str, other: str) -> bool:
    """Whether sink id ``other`` belongs to the same routing sink as ``own`` (a sub-sink's
    id, or the routing sink's own): sub-sinks of one query decide the same batches, which a
    check for a predecessor of this sink must not take for a copied checkpoint."""
    if SEPARATOR not in own:
        return False
    family = own.rsplit(SEPARATOR, 1)[0]
    return other == family or other.startswith(family + SEPARATOR)


Default = str | int | float | bool


@dataclass(frozen=True)
class Option:
    """One option as users write it, with what the reference says about it.

    ``name`` keeps the user's spelling (``maxOffsetsPerTrigger``); Spark lower-cases option
    names, so matching uses ``key``. A name ending in ``.*`` documents a pass-through
    prefix. ``default`` is the value the connector's parser falls back to (it reads it from
    here, so the reference shows what the code does); ``shown`` stands in for a default the
    parser computes (derived from the checkpoint location, different for batch reads).
    """

    name: str
    description: str
    default: Default | None = None
    shown: str | None = None
    required: bool = False

    @property
    def key(self) -> str:
        return self.name.lower()

    @property
    def is_prefix(self) -> bool:
        return self.name.endswith(".*")

    def default_text(self) -> str:
        """The default as the reference prints it."""
        if self.shown is not None:
            return self.shown
        if self.required:
            return "required"
        if self.default is None:
            return ""
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        return str(self.default)


@dataclass(frozen=True)
class OptionSpec:
    """The options one connector accepts: exact names plus pass-through prefixes.

    ``documented`` lists them for the reference (the docs' option tables are generated
    from it); build a connector's spec with ``OptionSpec.of`` so names and documentation
    come from one list.
    """

    names: frozenset[str]
    prefixes: tuple[str, ...] = ()
    required: frozenset[str] = field(default_factory=frozenset)
    documented: tuple[Option, ...] = ()

    @classmethod
    def of(cls, *options: Option, prefixes: tuple[str, ...] = ()) -> OptionSpec:
        """A spec from documented options. An option under one of ``prefixes`` (a
        ``kafka.*`` setting with a default of ours) is documented, and accepted by its prefix."""
        names = frozenset(o.key for o in options if not o.is_prefix and not o.key.startswith(prefixes))
        required = frozenset(o.key for o in options if o.required)
        return cls(names, prefixes, required, options)

    def option(self, name: str) -> Option:
        """The documented option ``name`` (any case); KeyError when it is not documented."""
        for o in self.documented:
            if o.key == name.lower():
                return o
        raise KeyError(name)

    def default(self, name: str) -> Default:
        """The declared default of ``name``; KeyError when it has none (a bug of ours)."""
        value = self.option(name).default
        if value is None:
            raise KeyError(f"option {name!r} declares no default")
        return value

    def default_int(self, name: str) -> int:
        value = self.default(name)
        assert isinstance(value, int) and not isinstance(value, bool), name
        return value

    def default_bool(self, name: str) -> bool:
        value = self.default(name)
        assert isinstance(value, bool), name
        return value

    def default_str(self, name: str) -> str:
        value = self.default(name)
        assert isinstance(value, str), name
        return value

    def int_of(self, opts: Options, name: str, minimum: int | None = None) -> int:
        """Integer option ``name`` of ``opts``, else its declared default."""
        return opts.get_int_or(name, self.default_int(name), minimum=minimum)  # messages spell it so

    def seconds_of(self, opts: Options, name: str, minimum: int | None = None) -> float:
        """A milliseconds option (``...Ms``) of ``opts`` in seconds, else its declared default."""
        return self.int_of(opts, name, minimum) / 1000.0

    def undocumented(self) -> list[str]:
        """Accepted names and prefixes that have no documented option with a description."""
        described = {o.key for o in self.documented if o.description.strip()}
        wanted = sorted(self.names | self.required) + [p.lower() + "*" for p in self.prefixes]
        return [n for n in wanted if n not in described]

    def check(self, options: Mapping[str, str], what: str) -> None:
        """Raise on an unknown or missing option, naming it and the valid choices."""
        known = self.names | SPARK_OPTIONS
        for name in sorted(options):
            if name in known or any(name.startswith(p) for p in self.prefixes):
                continue
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            prefixes = f"; plus any option starting with {', '.join(self.prefixes)}" if self.prefixes else ""
            raise UnknownOptionError(
                f"unknown option {name!r} for {what}{hint}. Valid options: "
                f"{', '.join(sorted(self.names))}{prefixes}"
            )
        for name in sorted(self.required):
            if not options.get(name):
                raise MissingOptionError(f"{what} needs option {name!r}; set .option({name!r}, ...)")


class Options:
    """Read-only view of one query's options with typed getters that raise clear errors."""

    def __init__(self, raw: Mapping[str, str], what: str) -> None:
        self._raw = {k.lower(): v for k, v in raw.items()}
        self.what = what

    def __contains__(self, name: str) -> bool:
        return name.lower() in self._raw

    def raw(self) -> dict[str, str]:
        return dict(self._raw)

    def with_prefix(self, prefix: str) -> dict[str, str]:
        """Options starting with ``prefix``, the prefix stripped (``kafka.*`` pass-through)."""
        return {k[len(prefix):]: v for k, v in self._raw.items() if k.startswith(prefix)}

    def checkpoint(self) -> str | None:
        """The sink's checkpoint location as ``checkpoint_identity`` spells it (Spark passes
        it among a streaming sink's options); None when the user set none."""
        from spark_ext import compat

        raw = self.get_str(compat.CHECKPOINT_OPTION)
        return checkpoint_identity(raw) if raw is not None else None

    def get_str(self, name: str, default: str | None = None) -> str | None:
        value = self._raw.get(name.lower())
        return default if value is None or value == "" else value

    def require(self, name: str) -> str:
        value = self.get_str(name)
        if value is None:
            raise MissingOptionError(
                f"{self.what} needs option {name!r}; set .option({name!r}, ...)"
            )
        return value

    def get_int(self, name: str, default: int | None = None, minimum: int | None = None) -> int | None:
        value = self.get_str(name)
        if value is None:
            return default
        try:
            n = int(value.strip())
        except ValueError:
            raise InvalidOptionError(self._bad(name, value, "an integer")) from None
        if minimum is not None and n < minimum:
            raise InvalidOptionError(self._bad(name, value, f"an integer >= {minimum}"))
        return n

    def get_int_or(self, name: str, default: int, minimum: int | None = None) -> int:
        """``get_int`` for an option with a default (0 stays 0 where ``minimum`` allows it)."""
        value = self.get_int(name, minimum=minimum)
        return default if value is None else value

    def get_bool(self, name: str, default: bool) -> bool:
        value = self.get_str(name)
        if value is None:
            return default
        v = value.strip().lower()
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
        raise InvalidOptionError(self._bad(name, value, "true or false"))

    def _bad(self, name: str, value: str, expected: str) -> str:
        shown = "***" if is_secret(name) else repr(value)
        return f"option {name!r} of {self.what} is {shown}; expected {expected}"
