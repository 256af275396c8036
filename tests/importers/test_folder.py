"""importers.folder: a job folder's files by suffix; one that cannot be read is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from echo_view.errors import InputError
from importers.folder import folder_files, natural_key


def test_files_by_suffix_in_any_case_sub_folders_left_out(tmp_path: Path) -> None:
    for name in ("b.JSON", "a.json.gz", "notes.txt"):
        (tmp_path / name).write_text("x")
    (tmp_path / "c.json").mkdir()
    os.mkfifo(tmp_path / "pipe")  # not a suffix asked for: never opened
    assert folder_files(tmp_path, (".json", ".json.gz")) == [
        tmp_path / "a.json.gz",
        tmp_path / "b.JSON",
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file without read permission anyway")
def test_a_file_without_read_permission(tmp_path: Path) -> None:
    locked = tmp_path / "rank3.json"
    locked.write_text("{}")
    locked.chmod(0)
    with pytest.raises(InputError, match="Permission denied") as info:
        folder_files(tmp_path, (".json",))
    assert info.value.path == str(locked)


def test_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "rank1.json")  # opening it would wait for a writer for ever
    with pytest.raises(InputError, match="not a regular file"):
        folder_files(tmp_path, (".json",))


def test_natural_order_compares_numbers_as_numbers() -> None:
    names = ["rank-10.json", "rank-2.json", "rank-1.json", "node1_rank-0.json"]
    ordered = sorted((Path(n) for n in names), key=natural_key)
    assert [p.name for p in ordered] == [
        "node1_rank-0.json",
        "rank-1.json",
        "rank-2.json",
        "rank-10.json",
    ]
