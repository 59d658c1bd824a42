"""A bucket's state in files of its own, one version per batch (``state_location``).

Streaming stage 2 keeps its partials in Spark's state store by default
(``applyInPandasWithState``). With ``state_location`` it runs as a stateless grouped step
(``applyInArrow``) and keeps them here instead, which spares each batch the state store's
round trip. Layout, under the location:

    <query id>/<bucket>/<batch id, 20 digits>-<random>.arrow

Each file is the partials a bucket kept after a batch, in Arrow's IPC file format, with
the ``BucketState`` JSON (``state.encode_meta``) in the schema's metadata. Why this keeps
Spark's guarantees without the state store:

- **A batch reads the newest version below its own id.** Spark replays a batch with the
  same id, offsets and batch timestamp, so a replay starts from the same state and emits
  the same windows, whatever an earlier attempt of it wrote.
- **Every attempt writes its own file**, never renamed or overwritten: storage without an
  atomic rename (object stores) is fine, and a zombie attempt of a batch (an executor
  frozen past its run) adds a copy computed from the same inputs. A file whose writer
  died has no Arrow footer and is skipped; a batch that completed always left one whole
  file, since its task succeeded only after closing it.
- **Versions below the one a batch read are deleted** once it wrote its own: a replay of
  the batch needs only that one.
- The query id is Spark's, kept in the checkpoint: a restart finds its state, a new
  checkpoint starts empty. A copy of a checkpoint run beside its original shares the
  query id, so it must be given another ``state_location``.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from spark_ext.windows.frames import WindowError

META = b"spark_ext.windows"
_NAME = re.compile(r"^(\d{20})-[0-9a-f]+\.arrow$")


class StateLostError(WindowError):
    """A version the windows need cannot be read."""


def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    """``location`` (a local path or a URI such as ``s3://b/p``, ``hdfs://nn/p``) as pyarrow's
    file system and the path within it."""
    uri = location if "://" in location else os.path.abspath(location)
    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
        raise WindowError(f"state_location {location!r} cannot be opened ({e}); give a directory every "
                          "executor reaches: a path on shared storage, or an s3://, gs://, hdfs:// "
                          "URI") from e


def check_location(location: str) -> str:
    """Driver, when the query is built: ``location`` must be a directory this process can
    create and write to (executors write there too). Returns it as a URI."""
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
    return location if "://" in location else os.path.abspath(location)


@dataclass(frozen=True)
class Version:
    """A version read: the partials kept and the bucket's JSON, as of batch ``batch_id``."""

    batch_id: int
    partials: pa.Table
    meta: str


class BucketFiles:
    """One bucket's versions (executor, stage 2 of a streaming batch)."""

    def __init__(self, fs: pafs.FileSystem, directory: str) -> None:
        self.fs, self.dir = fs, directory

    @staticmethod
    def at(location: str, query_id: str, bucket: int) -> BucketFiles:
        fs, root = filesystem(location)
        return BucketFiles(fs, f"{root}/{query_id}/{bucket}")

    def _files(self) -> dict[int, list[str]]:
        sel = pafs.FileSelector(self.dir, allow_not_found=True)
        out: dict[int, list[str]] = {}
        for info in self.fs.get_file_info(sel):
            m = _NAME.match(info.base_name)
            if m and info.type == pafs.FileType.File:
                out.setdefault(int(m.group(1)), []).append(info.path)
        return out

    def read_before(self, batch_id: int) -> Version | None:
        """The newest version written by a batch below ``batch_id``; None before the first."""
        files = self._files()
        older = [b for b in files if b < batch_id]
        if not older:
            return None
        newest = max(older)
        errors = []
        for path in sorted(files[newest]):
            try:
                with self.fs.open_input_file(path) as f:
                    table = pa.ipc.open_file(f).read_all()
            except (pa.ArrowInvalid, OSError) as e:  # its writer died mid-file
                errors.append(f"{path}: {e}")
                continue
            meta = (table.schema.metadata or {}).get(META)
            if meta is None:
                errors.append(f"{path}: no {META.decode()} metadata")
                continue
            return Version(newest, table.replace_schema_metadata(None), meta.decode())
        raise StateLostError(f"the windows' state of batch {newest} in {self.dir} cannot be read "
                             f"({'; '.join(errors)}); the files were changed or lost outside the query. "
                             "Restart with a new checkpointLocation to start the windows over")

    def write(self, batch_id: int, partials: pa.Table, meta: str) -> None:
        """This attempt's version of ``batch_id``, written whole or, if it dies, without footer.
        The name is random: task attempt ids start over in each application, and a replay
        must never write into the file of an attempt that may still be running."""
        self.fs.create_dir(self.dir, recursive=True)
        table = partials.replace_schema_metadata({META: meta.encode()})
        with self.fs.open_output_stream(f"{self.dir}/{batch_id:020d}-{uuid.uuid4().hex}.arrow") as out, \
                pa.ipc.new_file(out, table.schema) as w:
            w.write_table(table)

    def purge(self, below: int) -> None:
        """Delete versions below batch ``below`` (the one the current batch read)."""
        for batch_id, paths in self._files().items():
            if batch_id < below:
                for path in paths:
                    try:
                        self.fs.delete_file(path)
                    except FileNotFoundError:  # another attempt purged it first
                        pass
