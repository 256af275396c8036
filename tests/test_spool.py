"""Results handed from a worker to the command through shared memory (:mod:`echo_view.spool`):
the same object back, its arrays mapped rather than copied, no file left behind, and the
result itself wherever the folder cannot be used."""

from __future__ import annotations

import mmap
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from echo_view import spool as spool_module
from echo_view.model.mapped import MappedBytes
from echo_view.spool import Spooled, SpoolTo, spool, spool_folder, sweep_stale, unspool

resource = pytest.importorskip("resource", reason="open-file limits are Unix's")
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not Path("/dev/shm").is_dir(),
    reason="shared-memory spooling needs Linux's /dev/shm",
)


def _result() -> dict[str, Any]:
    rng = np.random.default_rng(7)
    args = bytes(range(256)) * 4_000
    return {
        "ts": rng.integers(0, 1 << 60, 300_000, dtype=np.int64),
        "dur": rng.random(200_000).astype(np.float32),
        "args": args,  # mapped, on a page of its own
        "note": b"x" * 100,  # pickled inline
        "again": args,  # the same text: written once, mapped once
        "name": "rank 3",
    }


def test_a_large_result_travels_as_a_file_and_comes_back_equal_and_writable() -> None:
    result = _result()
    with spool_folder() as to:
        assert to is not None and to.min_bytes == spool_module.MIN_BYTES
        item = spool(result, to)
        assert isinstance(item, Spooled)
        name = Path(item.path).name
        assert sorted(os.listdir(to.folder)) == [name, name + ".arrays"]
        # The arrays file holds both arrays, each on a 64-byte boundary, then the large text
        # on a page boundary.
        assert [o % 64 for o, _ in item.buffers] == [0, 0]
        assert [n for _, n in item.buffers] == [300_000 * 8, 200_000 * 4]
        ((at, size),) = item.texts
        assert at % mmap.ALLOCATIONGRANULARITY == 0 and at >= 300_000 * 8 + 200_000 * 4
        assert size == 1_024_000
        back = unspool(item)
        assert os.listdir(to.folder) == []  # removed once mapped
    assert not Path(to.folder).exists()
    assert back.keys() == result.keys() and back["name"] == "rank 3"
    assert back["note"] == b"x" * 100 and type(back["note"]) is bytes
    # The large text is a read-only mapping that reads as the bytes it stands for.
    text = back["args"]
    assert isinstance(text, MappedBytes) and text == result["args"]
    assert back["again"] is text
    assert len(text) == 1_024_000 and text[256:260] == bytes(range(4))
    assert type(text[5:9]) is bytes and text.find(bytes([255, 0])) == 255
    assert np.frombuffer(text, dtype=np.uint8)[-1] == 255
    with pytest.raises(TypeError):
        text[0:1] = b"y"  # read-only, as bytes are
    assert pickle.loads(pickle.dumps(back))["args"] == result["args"]
    assert type(pickle.loads(pickle.dumps(text))) is bytes
    assert text != result["args"][:-1] and text != "text"
    assert bytes([254, 255, 0]) in text and 7 in text and b"\x00\x00" not in text
    assert list(text)[:3] == [0, 1, 2]
    for key in ("ts", "dur"):
        assert back[key].dtype == result[key].dtype
        assert np.array_equal(back[key], result[key])
    # The arrays are views of the mapping, and writable: joining may shift
    # a rank's times in place.
    assert back["ts"].base is not None
    back["ts"][0] = -1
    assert back["ts"][0] == -1 and result["ts"][0] != -1


def test_small_results_and_folders_a_worker_cannot_use_travel_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = {"events": 12}

    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "No space left on device")

    with spool_folder() as to:
        assert to is not None
        assert spool(small, to) is small  # under min_bytes
        big = _result()
        # A worker on another machine does not have the folder.
        elsewhere = SpoolTo(str(tmp_path / "not-here"), 0)
        assert spool(big, elsewhere) is big
        assert spool(big, None) is big
        # Nor does one that may not write there (another user's folder).
        monkeypatch.setattr(spool_module.tempfile, "mkstemp", full)
        assert spool(big, to) is big
        monkeypatch.undo()

        # A full /dev/shm: the write fails, the partial file goes, the result travels itself.
        monkeypatch.setattr(spool_module.os, "fdopen", full)
        assert spool(big, to) is big
        assert os.listdir(to.folder) == []
        assert unspool(small) is small
        monkeypatch.undo()
        # A result that cannot be pickled fails as it would on Dask's socket, leaving no file.
        with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
            spool({"big": big, "f": lambda: None}, to)
        assert os.listdir(to.folder) == []


def test_results_past_the_reads_open_file_budget_are_copied_not_mapped() -> None:
    # Each mapping holds an open file: past the read's budget a result comes back in memory.
    result = _result()
    with spool_folder() as to:
        assert to is not None
        assert spool_module._BUDGETS[to.folder] > 0  # the open files the read may map with
        spool_module._BUDGETS[to.folder] = 1  # less than the arrays' and the text's mappings
        back = unspool(spool(result, to))
        assert os.listdir(to.folder) == []
        assert type(back["args"]) is bytes and back["args"] == result["args"]
        assert back["again"] is back["args"]
        for key in ("ts", "dur"):
            assert np.array_equal(back[key], result[key])
        back["ts"][0] = -1  # writable, as a mapped result is
        assert spool_module._BUDGETS[to.folder] == 1  # nothing taken
        spool_module._BUDGETS[to.folder] = 2
        assert isinstance(unspool(spool(result, to))["args"], MappedBytes)
        assert spool_module._BUDGETS[to.folder] == 0
    assert to.folder not in spool_module._BUDGETS


_MANY_MAPPINGS = """
import resource, sys
import numpy as np
from echo_view import spool
from echo_view.model.mapped import MappedBytes
resource.setrlimit(resource.RLIMIT_NOFILE, (400, 400))  # a login node's small limit
spool.MIN_BYTES = 0  # small results through shared memory too, to keep the test small
text = bytes(range(256)) * 300  # 76.8 kB: a mapped text
kept = []
with spool.spool_folder() as to:
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == 400  # no higher hard limit
    for i in range(300):  # 600 mappings wanted: more than the process may open
        item = spool.spool({"a": np.full(1_000, i), "args": text}, to)
        kept.append(spool.unspool(item))
    with open(sys.executable, "rb"):  # files can still be opened
        pass
assert all(k["args"] == text and int(k["a"][-1]) == i for i, k in enumerate(kept))
print(sum(isinstance(k["args"], MappedBytes) for k in kept), len(kept))
"""


def test_a_read_never_runs_out_of_open_files_for_its_mappings() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 400:
        pytest.skip(f"this machine's hard limit on open files is {hard}")
    done = subprocess.run(
        [sys.executable, "-c", _MANY_MAPPINGS], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    mapped, total = map(int, done.stdout.split())
    # The first results mapped (two files each) until the budget of 400 less those open less
    # the reserve of 256 ran out; the rest copied.
    assert total == 300 and 0 < mapped < 80


def test_the_soft_open_files_limit_is_raised_to_the_hard_one() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"this machine's hard limit on open files is {hard}")
    code = (
        "import resource; from echo_view.spool import spool_folder\n"
        "s, h = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, h))\n"
        "with spool_folder():\n"
        "    print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    soft = int(done.stdout)
    if hard == resource.RLIM_INFINITY:  # up to the kernel's cap on open files
        assert soft == int(Path("/proc/sys/fs/nr_open").read_text())
    else:
        assert soft == hard


def test_the_folder_goes_with_the_files_left_in_it() -> None:
    with spool_folder() as to:
        assert to is not None
        item = spool(_result(), to)  # never loaded (a read stopped by an earlier error)
        assert Path(item.path).exists() and Path(item.path + ".arrays").exists()
    assert not Path(to.folder).exists()


def test_a_file_a_late_worker_writes_while_the_folder_goes_is_removed_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task of a cluster the command did not start may still create a file while the
    folder is being removed (the command stopped at another file's error): the folder is
    emptied again, so none is left behind; one that keeps being refilled is given up on."""
    folder = tmp_path / "spool"
    folder.mkdir()
    (folder / "early").write_bytes(b"x")
    real = spool_module.shutil.rmtree
    calls: list[str] = []

    def racing(path: str, ignore_errors: bool = False) -> None:
        calls.append(path)
        real(path, ignore_errors=ignore_errors)
        if len(calls) == 1:  # the late file lands between the emptying and the rmdir
            Path(path).mkdir()
            (Path(path) / "late").write_bytes(b"y")

    monkeypatch.setattr(spool_module.shutil, "rmtree", racing)
    monkeypatch.setattr(spool_module.time, "sleep", lambda s: None)
    assert spool_module.remove_folder(str(folder))
    assert len(calls) == 2 and not folder.exists()
    folder.mkdir()
    monkeypatch.setattr(spool_module.shutil, "rmtree", lambda path, ignore_errors=False: None)
    assert not spool_module.remove_folder(str(folder))
    assert folder.exists()


def test_no_folder_where_there_is_no_shared_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spool_module, "SHM", Path("/no/such/shm"))
    with spool_folder() as to:
        assert to is None


def test_folders_of_commands_that_are_gone_are_swept(tmp_path: Path) -> None:
    # A command killed mid-read (SIGKILL) leaves its folder; the next read removes it. A
    # living command's folder, and names that are not echo-view's, stay.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    stale = tmp_path / f"echo-view-{int(dead.stdout)}-abc"
    stale.mkdir()
    (stale / "tmp123").write_bytes(b"x" * 10)
    live = tmp_path / f"echo-view-{os.getpid()}-def"
    live.mkdir()
    other = tmp_path / "echo-view-notapid"
    other.mkdir()
    assert sweep_stale(tmp_path) == [stale]
    assert not stale.exists() and live.exists() and other.exists()
    with spool_folder() as to:
        assert to is not None
        assert Path(to.folder).name.startswith(f"echo-view-{os.getpid()}-")
