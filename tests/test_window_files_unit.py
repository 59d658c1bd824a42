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


def test_a_batch_reads_the_newest_version_below_its_own(files):
    assert files.read_before(0) is None
    files.write(0, _partials(1), '{"v": 0}')
    files.write(1, _partials(2), '{"v": 1}')
    files.write(3, _partials(3), '{"v": 3}')
    got = files.read_before(3)  # a replay of batch 3 starts from batch 1's state, not its own
    assert got is not None and (got.batch_id, got.meta, got.partials.num_rows) == (1, '{"v": 1}', 2)
    assert got.partials.schema.metadata is None and got.partials.equals(_partials(2))
    assert files.read_before(9).batch_id == 3


def test_copies_of_one_batch_from_a_retried_or_zombie_attempt_are_both_whole_and_either_is_read(files):
    files.write(4, _partials(2), '{"v": 4}')
    files.write(4, _partials(2), '{"v": 4}')  # a second attempt never writes into the first's file
    names = [i.base_name for i in files.fs.get_file_info(pafs.FileSelector(files.dir))]
    assert len(names) == 2 and len(set(names)) == 2
    assert files.read_before(5).meta == '{"v": 4}'


def test_a_file_whose_writer_died_is_skipped_when_a_whole_copy_exists_and_is_an_error_when_none(files):
    files.write(1, _partials(2), '{"v": 1}')
    files.write(2, _partials(5), '{"v": 2}')
    [whole] = [i.path for i in files.fs.get_file_info(pafs.FileSelector(files.dir))
               if i.base_name.startswith(f"{2:020d}-")]
    with files.fs.open_input_file(whole) as f:
        blob = f.read()
    torn = whole.replace(".arrow", "0.arrow")
    with files.fs.open_output_stream(torn) as out:
        out.write(blob[: len(blob) // 2])  # no footer: its writer was killed mid-file
    assert files.read_before(3).meta == '{"v": 2}'
    files.fs.delete_file(whole)
    with pytest.raises(StateLostError, match=r"state of batch 2 .* cannot be read"):
        files.read_before(3)


def test_purge_deletes_only_versions_below_the_one_read(files):
    for b in range(5):
        files.write(b, _partials(1), f'{{"v": {b}}}')
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
