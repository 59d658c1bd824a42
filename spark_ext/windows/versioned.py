"""A bucket's state in files of its own, one version per batch (``state_location``).

Streaming stage 2 keeps its partials in Spark's state store by default
(``applyInPandasWithState``). With ``state_location`` it runs as a stateless grouped step
(``applyInArrow``) and keeps them here instead, which spares each batch the state store's
round trip. Layout, under the location:

    <query id>/<metrics name>/<bucket>/<batch id, 20 digits>-<random>.arrow

Each file is the partials a bucket kept after a batch, in Arrow's IPC file format, with
the ``BucketState`` JSON (``state.encode_meta``) in the schema's metadata. Why this keeps
Spark's guarantees without the state store:

- **A batch reads the newest version below its own id.** Spark replays a batch with the
  same id, offsets and batch timestamp, so a replay starts from the same state and emits
  the same windows, whatever an earlier attempt of it wrote.
- **Every attempt writes its own file**, never renamed or overwritten: storage without an
  atomic rename (object stores) is fine, and a retried or zombie attempt adds a copy. A
  file whose writer died has no Arrow footer and is skipped; a batch whose copies are all
  torn never completed for the bucket, so the version before it counts. Of several whole
  copies, the one built on the newest version wins, then the last written (a replay
  after an attempt that crashed).
- **Versions below the one a batch read are deleted**, oldest first, once it wrote its
  own: a replay of the batch needs only that one. A batch that finds nothing below its
  id but a later batch's files (another run of the query went ahead and purged) fails
  rather than start empty.
- The query id is Spark's, kept in the checkpoint: a restart finds its state, a new
  checkpoint starts empty. A copy of a checkpoint run beside its original shares the
  query id, so it must be given another ``state_location``. Each windowed aggregation
  of a query has its own directory, named by its ``metrics`` (unique within a query).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from spark_ext.windows.frames import WindowError

log = logging.getLogger(__name__)

META = b"spark_ext.windows"
BASE = b"spark_ext.windows.base"  # the batch whose version this one was built on (-1: none)
_NAME = re.compile(r"^(\d{20})-[0-9a-f]+\.arrow$")


class StateLostError(WindowError):
    """A version the windows need cannot be read."""


def _uri(location: str) -> str:
    return location if "://" in location else os.path.abspath(location)


@functools.lru_cache(maxsize=8)
def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """``location`` (a local path or a URI such as ``s3://b/p``, ``hdfs://nn/p``) as pyarrow's
    file system and the path within it."""
    try:
        return pafs.FileSystem.from_uri(_uri(location))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
        raise WindowError(f"state_location {location!r} cannot be opened ({e}); give a directory every "
                          "executor reaches: a path on shared storage, or an s3://, gs://, hdfs:// "
                          "URI") from e


def check_location(location: str, local: bool = True) -> str:
    """Driver, when the query is built: ``location`` must be a directory this process can
    create and write to (executors write there too). Returns it as a URI. A Spark Connect
    client (``local`` False) is not where the driver runs: it only checks the form."""
    if not local:
        if "://" not in location and not os.path.isabs(location):
            raise WindowError(f"state_location {location!r} is relative; through Spark Connect give an "
                              "absolute path or a URI on storage the server's executors reach")
        return location
    fs, path = filesystem(location)
    probe = f"{path}/.spark_ext_probe-{os.getpid()}"
    try:
        fs.create_dir(path, recursive=True)
        with fs.open_output_stream(probe) as out:
            out.write(b"ok")
        fs.delete_file(probe)
    except OSError as e:
        raise WindowError(f"state_location {location!r} is not writable ({e}); give a directory on storage "
                          "every executor can write to") from e
    return _uri(location)


@dataclass(frozen=True)
class Version:
    """A version read: the partials kept and the bucket's JSON, as of batch ``batch_id``."""

    batch_id: int
    partials: pa.Table
    meta: str


@dataclass(frozen=True)
class _Copy:
    path: str
    mtime: float


class BucketFiles:
    """One bucket's versions (executor, stage 2 of a streaming batch)."""

    def __init__(self, fs: pafs.FileSystem, directory: str) -> None:
        self.fs, self.dir = fs, directory
        self._listed: dict[int, list[_Copy]] | None = None  # read_before's listing, for purge

    @staticmethod
    def at(location: str, query_id: str, operator: str, bucket: int) -> BucketFiles:
        """``operator``: the windowed aggregation within the query (its ``metrics`` name,
        which Spark requires to be unique in a query)."""
        fs, root = filesystem(location)
        return BucketFiles(fs, f"{root}/{query_id}/{operator}/{bucket}")

    def _files(self) -> dict[int, list[_Copy]]:
        sel = pafs.FileSelector(self.dir, allow_not_found=True)
        out: dict[int, list[_Copy]] = {}
        for info in self.fs.get_file_info(sel):
            m = _NAME.match(info.base_name)
            if m and info.type == pafs.FileType.File:
                mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
                out.setdefault(int(m.group(1)), []).append(_Copy(info.path, mtime))
        return out

    def _read(self, copy: _Copy) -> tuple[int, float, pa.Table, str] | None:
        """(the batch the copy was built on, its time, its partials, its JSON); None if torn."""
        try:
            with self.fs.open_input_file(copy.path) as f:
                table = pa.ipc.open_file(f).read_all()
        except (pa.ArrowInvalid, OSError):  # its writer died mid-file: no footer
            return None
        md = table.schema.metadata or {}
        if META not in md or BASE not in md:
            return None
        return int(md[BASE]), copy.mtime, table.replace_schema_metadata(None), md[META].decode()

    def read_before(self, batch_id: int) -> Version | None:
        """The newest version a batch below ``batch_id`` completed; None before the first.

        Among copies of one batch the one built on the newest version wins (an attempt
        that read while a later batch purged may have found an older one), then the last
        written (a replay after one that crashed). A batch whose copies are all torn never
        completed for this bucket: the version before it counts."""
        files = self._listed = self._files()
        older = sorted((b for b in files if b < batch_id), reverse=True)
        if not older and any(b > batch_id for b in files):
            raise StateLostError(
                f"batch {batch_id} of the windows needs the state before it in {self.dir}, but a later "
                f"batch ({max(files)}) already ran there and purged it: another run of this query (a "
                "copy of its checkpoint, or a zombie of an old batch) shares the state_location. Give "
                "each checkpoint its own state_location")
        for b in older:
            whole = [r for c in files[b] if (r := self._read(c)) is not None]
            if whole:
                _, _, table, meta = max(whole, key=lambda w: w[:2])  # newest base, then latest
                return Version(b, table, meta)
            log.warning("every copy of batch %s's windows state in %s is torn (its writers died); "
                        "reading the version before it", b, self.dir)
        if batch_id > 0:
            log.warning("no windows state below batch %s in %s: starting empty. Expected when no event "
                        "reached this bucket before; if the query ran before with another state_location, "
                        "or with the state in Spark's state store, restart it with that one", batch_id,
                        self.dir)
        return None

    def write(self, batch_id: int, base: Version | None, partials: pa.Table, meta: str) -> None:
        """This attempt's version of ``batch_id``, built on ``base``: written whole or, if it
        dies, without footer. The name is random: task attempt ids start over in each
        application, and a replay must never write into the file of an attempt that may
        still be running."""
        self.fs.create_dir(self.dir, recursive=True)
        md = {META: meta.encode(), BASE: str(base.batch_id if base is not None else -1).encode()}
        table = partials.replace_schema_metadata(md)
        with self.fs.open_output_stream(f"{self.dir}/{batch_id:020d}-{uuid.uuid4().hex}.arrow") as out, \
                pa.ipc.new_file(out, table.schema) as w:
            w.write_table(table)

    def purge(self, below: int) -> None:
        """Delete versions below batch ``below`` (the one the current batch read), oldest
        first: an attempt listing meanwhile sees the newest of them or none, never a gap.
        They are the ones ``read_before`` listed: one listing a call (a copy a zombie adds
        later goes with the next purge)."""
        files = self._listed if self._listed is not None else self._files()
        for batch_id in sorted(b for b in files if b < below):
            for copy in files[batch_id]:
                try:
                    self.fs.delete_file(copy.path)
                except FileNotFoundError:  # another attempt purged it first
                    pass
