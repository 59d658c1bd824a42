"""The windows' versioned state files (``state_location``), on local disk and on a file
system without rename (pure logic: no Spark)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from spark_ext.windows import versioned
from spark_ext.windows.frames import WindowError
from spark_ext.windows.versioned import BucketFiles, StateLostError


class _NoRename(pafs.FileSystemHandler):
    """Local disk, but moving a file fails, as on an object store without atomic rename."""

    def __init__(self) -> None:
        self.local = pafs.LocalFileSystem()

    def get_type_name(self) -> str:
        return "no-rename"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths):
        return self.local.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.local.get_file_info(selector)

    def create_dir(self, path, recursive):
        self.local.create_dir(path, recursive=recursive)

    def delete_dir(self, path):
        self.local.delete_dir(path)

    def delete_dir_contents(self, path, missing_dir_ok=False):
        self.local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self):
        raise OSError("not here")

    def delete_file(self, path):
        self.local.delete_file(path)

    def move(self, src, dest):
        raise OSError("this file system cannot rename")

    def copy_file(self, src, dest):
        self.local.copy_file(src, dest)

    def open_input_stream(self, path):
        return self.local.open_input_stream(path)

    def open_input_file(self, path):
        return self.local.open_input_file(path)

    def open_output_stream(self, path, metadata):
        return self.local.open_output_stream(path)

    def open_append_stream(self, path, metadata):
        return self.local.open_append_stream(path)


def _partials(n: int) -> pa.Table:
    return pa.table({"k": pa.array([f"k{i}" for i in range(n)]), "frame": pa.array(range(n), pa.int64())})


@pytest.fixture(params=["local", "no-rename"])
def files(request, tmp_path) -> BucketFiles:
    fs = pafs.LocalFileSystem() if request.param == "local" else pafs.PyFileSystem(_NoRename())
    return BucketFiles(fs, str(tmp_path / "q" / "0"))


def _chain(files: BucketFiles, batches: range) -> None:
    """Versions of ``batches``, each built on the one before, as stage 2 writes them."""
    for b in batches:
        files.write(b, files.read_before(b), _partials(b + 1), f'{{"v": {b}}}')


def _paths(files: BucketFiles, batch: int) -> list[str]:
    return [i.path for i in files.fs.get_file_info(pafs.FileSelector(files.dir))
            if i.base_name.startswith(f"{batch:020d}-")]


def test_a_batch_reads_the_newest_version_below_its_own(files):
    assert files.read_before(0) is None
    _chain(files, range(2))
    files.write(3, files.read_before(3), _partials(3), '{"v": 3}')
    got = files.read_before(3)  # a replay of batch 3 starts from batch 1's state, not its own
    assert got is not None and (got.batch_id, got.meta, got.partials.num_rows) == (1, '{"v": 1}', 2)
    assert got.partials.schema.metadata is None and got.partials.equals(_partials(2))
    assert files.read_before(9).batch_id == 3


def test_of_two_copies_of_a_batch_the_one_built_on_the_newer_version_then_the_later_one_is_read(files):
    _chain(files, range(4))
    files.write(4, files.read_before(4), _partials(2), '{"v": "4 replayed"}')
    names = [i.base_name for i in files.fs.get_file_info(pafs.FileSelector(files.dir))]
    assert len(names) == 5 and len(set(names)) == 5  # a second attempt never writes into the first's file
    # a zombie of batch 4 that listed while batch 5 purged, and found batch 2's version
    files.write(4, files.read_before(3), _partials(9), '{"v": "4 on 2"}')
    assert files.read_before(5).meta == '{"v": "4 replayed"}'
    files.write(4, files.read_before(4), _partials(2), '{"v": "4 again"}')  # the last written wins
    assert files.read_before(5).meta == '{"v": "4 again"}'


def test_a_file_whose_writer_died_is_skipped_and_a_batch_with_only_torn_copies_never_completed(files):
    _chain(files, range(3))
    [whole] = _paths(files, 2)
    with files.fs.open_input_file(whole) as f:
        blob = f.read()
    torn = whole.replace(".arrow", "0.arrow")
    with files.fs.open_output_stream(torn) as out:
        out.write(blob[: len(blob) // 2])  # no footer: its writer was killed mid-file
    assert files.read_before(3).meta == '{"v": 2}'
    files.fs.delete_file(whole)
    got = files.read_before(3)  # batch 2 never completed here: batch 1's version counts
    assert (got.batch_id, got.meta) == (1, '{"v": 1}')


def test_a_batch_whose_state_a_later_batch_purged_fails_instead_of_starting_empty(files):
    """Another run of the query (a copy of its checkpoint, a zombie of an old batch) went
    ahead in the same location: starting empty would silently drop every open window."""
    _chain(files, range(6))
    files.purge(below=4)
    with pytest.raises(StateLostError, match=r"batch 2 .* a later batch \(5\) already ran there"):
        files.read_before(2)
    assert files.read_before(5).batch_id == 4


def test_purge_deletes_only_versions_below_the_one_read(files):
    _chain(files, range(5))
    files.purge(below=3)
    left = sorted(i.base_name[:20] for i in files.fs.get_file_info(pafs.FileSelector(files.dir)))
    assert [int(b) for b in left] == [3, 4]
    files.purge(below=3)  # again, as a retried attempt does: nothing to delete, no error
    assert files.read_before(4).batch_id == 3


def test_an_unwritable_location_is_refused_naming_it(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(WindowError, match=r"state_location .*file/state.* is not writable"):
        versioned.check_location(str(blocker / "state"))
    assert versioned.check_location(str(tmp_path / "ok")) == str(tmp_path / "ok")
    assert list((tmp_path / "ok").iterdir()) == []  # the probe is gone


def test_a_spark_connect_client_checks_only_the_form_of_the_location(tmp_path):
    """The client is not where the driver runs: nothing is created there, and a relative
    path (relative to what?) is refused."""
    with pytest.raises(WindowError, match="is relative; through Spark Connect"):
        versioned.check_location("state", local=False)
    assert versioned.check_location(str(tmp_path / "s"), local=False) == str(tmp_path / "s")
    assert not (tmp_path / "s").exists()
    assert versioned.check_location("s3://bucket/state", local=False) == "s3://bucket/state"
