"""``echo_view.loading``: which importer reads a job's paths, and one-line errors for paths that
are not one job."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
from functools import partial
from pathlib import Path

import pytest

from echo_view import loading
from echo_view.errors import ConfigError, InputError, LimitError, UsageError
from echo_view.formats import max_inflated_bytes, set_max_inflated_bytes
from echo_view.loading import (
    FAN_OUT_BYTES,
    SCRIPT_TRACER_REVISION,
    SERIAL,
    Parallel,
    _on_worker,
    _read_rank_file,
    build_registry,
    cache_dir,
    fan_out_sizes,
    fans_out,
    file_batches,
    graph_key,
    is_workload_input,
    job_importer,
    key_hash,
    load_config,
    map_files,
    prune_cache,
    read_job,
    read_ranks,
    script_file,
    setting_file,
    trace_script_config,
)
from echo_view.model import Trace
from echo_view.workers import default_workers
from importers.kineto import KinetoImporter

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def test_a_directory_of_ranks_is_one_job() -> None:
    job = read_job([SAMPLES / "dlrm_kineto"])
    assert job.ranks == tuple(range(8))
    files = sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))[:2]
    assert read_job(files).ranks == (0, 1)


def test_paths_of_two_formats_or_none_are_refused() -> None:
    reg = build_registry()
    nsys = SAMPLES / "nsys" / "h100_2gpu_1s.sqlite.gz"
    kineto = SAMPLES / "hta_nccl" / "nccl_data.json.gz"
    with pytest.raises(UsageError, match="one format"):
        job_importer(reg, [kineto, nsys])
    with pytest.raises(UsageError, match="no input path"):
        read_job([], reg)
    with pytest.raises(InputError, match="no such file"):
        read_job([SAMPLES / "absent.json"], reg)


def test_configs_and_graphs_are_workload_inputs() -> None:
    configs = SAMPLES / "configs"
    assert is_workload_input(configs / "gpt175b-1024xH100.toml")
    assert is_workload_input(configs / "gpt175b-1024xH100.graph.json.gz")
    assert not is_workload_input(SAMPLES / "hta_nccl" / "nccl_data.json.gz")


def test_a_cluster_is_started_only_when_it_can_pay(tmp_path: Path) -> None:
    small = sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))
    assert not fans_out(small, Parallel())  # 8 files, 0.4 MB: a cluster would cost more
    assert not fans_out(small[:1], Parallel(workers=4))  # one file: nothing to share
    assert not fans_out(small, SERIAL)
    assert fans_out(small, Parallel(workers=2))  # asked for
    assert fans_out(small, Parallel(scheduler="tcp://127.0.0.1:8786"))
    big = []
    for i in range(2):  # sparse files: their size, not their blocks, counts
        f = tmp_path / f"rank{i}.json"
        with open(f, "wb") as fh:
            fh.truncate(FAN_OUT_BYTES // 2)
        big.append(f)
    assert fans_out(big, Parallel()) == (default_workers() > 1)


def test_each_rank_file_is_sized_once_on_its_way_to_a_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sizing a file opens and stats it, which costs on a cluster's shared file system: the
    fan-out rule and the tasks' batches share one sizing, and a serial read sizes nothing."""
    files = []
    for i in range(4):
        f = tmp_path / f"rank{i}.json"
        with open(f, "wb") as fh:
            fh.truncate(FAN_OUT_BYTES // 2)  # sparse: 2x the fan-out threshold in all
        files.append(f)
    sized: list[Path] = []
    real = loading._json_bytes

    def counted(path: Path) -> int:
        sized.append(path)
        return real(path)

    monkeypatch.setattr(loading, "_json_bytes", counted)
    assert fan_out_sizes(files, SERIAL) is None and sized == []
    assert fan_out_sizes(files, Parallel(workers=2)) == [FAN_OUT_BYTES // 2] * 4
    assert sized == files
    sized.clear()
    by_default = fan_out_sizes(files, Parallel())
    assert by_default == ([FAN_OUT_BYTES // 2] * 4 if default_workers() > 1 else None)
    assert sized == (files if default_workers() > 1 else [])
    # Sizes handed to map_files decide the fan-out: nothing is sized again. (Here they say
    # "fan out", so stop the cluster before it starts: the point is the sizing.)
    sized.clear()

    class Stop(Exception):
        pass

    def no_cluster(*args: object) -> None:
        raise Stop

    monkeypatch.setattr(loading, "dask_client", no_cluster)
    with pytest.raises(Stop):
        list(map_files(files, _size_or_error, Parallel(workers=2), sizes=[1, 1, 1, 1]))
    assert sized == []


def test_serial_reading_does_not_touch_dask(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_cluster(*args: object) -> None:
        raise AssertionError("a cluster was opened")

    monkeypatch.setattr("echo_view.loading.dask_client", no_cluster)
    files = sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))
    assert read_job(files, parallel=Parallel()).ranks == tuple(range(8))
    assert read_job(files, parallel=SERIAL).ranks == tuple(range(8))


def test_a_rank_file_read_elsewhere_keeps_the_input_limit_and_returns_its_error() -> None:
    path = sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))[0]
    imp = KinetoImporter()
    read = partial(_read_rank_file, importer=imp, many=True)
    (part,) = _on_worker([path], work=read, inflation_cap=None)
    assert [t.rank for t in part.traces] == [0]
    try:
        # The first bad file ends the task: its error is the last result.
        (error,) = _on_worker([path, path], work=read, inflation_cap=1 << 10)
    finally:
        set_max_inflated_bytes(None)
    assert isinstance(error, LimitError) and "--max-inflated-bytes 1,024" in error.message
    assert max_inflated_bytes() is None


def test_a_script_config_is_keyed_by_the_script_text(tmp_path: Path) -> None:
    """A config's ``[model] script`` is found beside the config, and its graph's cache key
    changes with the script's text (an edited script is traced again)."""
    script = tmp_path / "step.py"
    script.write_text("def train_step():\n    pass\n")
    config = tmp_path / "job.toml"
    text = (SAMPLES / "scripts" / "llama3_8b_fsdp_8xh100.toml").read_text()
    config.write_text(text.replace('script = "llama3_fsdp.py"', 'script = "step.py:train_step"'))
    cfg = load_config(config)
    assert script_file(cfg) == (script, "train_step")
    before = key_hash(cfg)
    script.write_text("def train_step():\n    return None\n")
    assert key_hash(cfg) != before
    assert graph_key(cfg)["model"]["script"] == "step.py:train_step"
    # The script tracer's own revision: a graph it traced before it changed is traced again.
    assert graph_key(cfg)["script_tracer"] == SCRIPT_TRACER_REVISION >= 1


def test_setting_file_reads_a_named_file_and_never_a_switch_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--set interference=VALUE``: a path is read here (the simulator reads no files); a
    switch word stays a word even beside a file of that name, and a missing path is left to
    the simulator's message."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "off").write_text("not TOML [")
    model = tmp_path / "m.toml"
    model.write_text('kind = "constant"\n')
    doc = setting_file(f" {model} ")
    assert doc is not None and doc.path == model and doc.data == {"kind": "constant"}
    assert setting_file("off") is None and setting_file("On") is None
    assert setting_file(None) is None and setting_file("missing.toml") is None
    # "" named the current directory: ".: cannot read: Is a directory"
    assert setting_file("") is None and setting_file("  ") is None


@pytest.mark.parametrize(
    ("script", "text"),
    [("", "names no file"), (" :train_step", "names no file"), ("sub", "sub is a directory")],
)
def test_a_script_that_names_no_file_is_one_error_at_its_key(
    tmp_path: Path, script: str, text: str
) -> None:
    # It was "echo-view: error: .: is a directory, not a file", naming neither the config
    # nor the key.
    (tmp_path / "sub").mkdir()
    config = tmp_path / "job.toml"
    sample = (SAMPLES / "scripts" / "llama3_8b_fsdp_8xh100.toml").read_text()
    config.write_text(sample.replace('script = "llama3_fsdp.py"', f'script = "{script}"'))
    with pytest.raises(ConfigError, match=text) as err:
        trace_script_config(load_config(config))
    assert err.value.where == "model.script" and str(err.value.path) == str(config)


@pytest.mark.parametrize("kind", ["fifo", "device", "long-name", "missing"])
def test_a_script_that_is_no_readable_file_is_refused_before_it_is_read(
    tmp_path: Path, kind: str
) -> None:
    """Keying a script config's graph read the script whole first: /dev/zero grew past 4 GB,
    a FIFO blocked for ever, a name too long for the file system was a traceback."""
    name = {
        "fifo": "fifo.py",
        "device": "/dev/zero",
        "long-name": "a" * 300 + ".py",
        "missing": "absent.py",
    }[kind]
    if kind == "fifo":
        os.mkfifo(tmp_path / name)
    config = tmp_path / "job.toml"
    sample = (SAMPLES / "scripts" / "llama3_8b_fsdp_8xh100.toml").read_text()
    config.write_text(sample.replace('script = "llama3_fsdp.py"', f'script = "{name}"'))
    cfg = load_config(config)
    with pytest.raises((ConfigError, InputError)) as err:
        key_hash(cfg)
    message = err.value.message
    expected = {
        "fifo": "is a FIFO (named pipe), not a regular file",
        "device": "is a character device, not a regular file",
        "long-name": "cannot reach the script",
        "missing": "no such script",
    }[kind]
    assert expected in message


def _rank_and_events(trace: Trace) -> tuple[int, int]:
    return trace.rank, len(trace)


def test_ranks_read_one_file_at_a_time_give_the_job_without_its_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))
    job = read_job(files)
    steps: list[str] = []
    read_file = KinetoImporter.read_rank_file

    def logged_read(self: KinetoImporter, path: Path, many: bool) -> object:
        steps.append("read")
        return read_file(self, path, many)

    def digest(trace: Trace) -> tuple[int, int]:
        steps.append("digest")
        return _rank_and_events(trace)

    monkeypatch.setattr(KinetoImporter, "read_rank_file", logged_read)
    head, results = read_ranks(files[::-1], digest)  # the job's rank order, whatever the paths'
    # Each file is digested before the next is read: one rank's events held at a time.
    assert steps == ["read", "digest"] * 8
    assert results == [(t.rank, len(t)) for t in job.traces]
    assert head.ranks == job.ranks and head.events == job.event_count()
    assert (head.alignment, head.world_size, head.predicted) == (
        job.alignment,
        job.world_size,
        job.predicted,
    )
    assert head.source == ", ".join(map(str, files[::-1]))
    folder = [SAMPLES / "dlrm_kineto"]
    assert read_ranks(folder, digest)[0].source == read_job(folder).source == str(folder[0])


def test_ranks_read_apart_keep_the_job_checks(tmp_path: Path) -> None:
    files = sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))
    copy = tmp_path / "again.json.gz"
    shutil.copy(files[1], copy)  # (the same file twice is refused before it is read)
    with pytest.raises(InputError, match="two files claim rank 1"):
        read_ranks([files[0], files[1], copy], _rank_and_events)
    with pytest.raises(InputError, match="the rank file is given twice"):
        read_ranks([files[0], files[1], files[1]], _rank_and_events)
    # A format read whole (not rank file by rank file) is digested after the read.
    nsys = SAMPLES / "nsys" / "h100_2gpu_1s.sqlite.gz"
    job = read_job([nsys])
    head, results = read_ranks([nsys], _rank_and_events)
    assert results == [(t.rank, len(t)) for t in job.traces]
    assert head.ranks == job.ranks and head.alignment == job.alignment


def _size_or_error(path: Path) -> int:
    if path.name == "bad":
        raise InputError("damaged", path=path)
    return path.stat().st_size


def test_files_are_worked_on_one_at_a_time_in_order_until_the_first_error(
    tmp_path: Path,
) -> None:
    files = [tmp_path / n for n in ("a", "bad", "c")]
    for i, f in enumerate(files):
        f.write_bytes(b"x" * i)
    done = map_files(files, _size_or_error, SERIAL)
    assert next(done) == (files[0], 0)  # the next file is not read before this one is taken
    with pytest.raises(InputError, match="damaged"):
        next(done)
    assert list(map_files(files[::2], _size_or_error, SERIAL)) == [(files[0], 0), (files[2], 2)]


def test_rank_files_are_batched_into_tasks_in_order_by_size() -> None:
    mib = 1 << 20
    # Small files of a large job (1 GiB, a quarter of a core's share 128 MiB): runs of
    # TASK_BYTES (64 MiB).
    batches = file_batches([4 * mib] * 256, cores=2)
    assert [len(b) for b in batches] == [16] * 16
    assert [i for b in batches for i in b] == list(range(256))  # every file once, in order
    # A smaller job: runs of a quarter of each core's share, so each worker gets 4 tasks.
    assert [len(b) for b in file_batches([mib] * 64, cores=2)] == [8] * 8
    # Files above the target are a task each; the remainder is a last, shorter run.
    assert [list(b) for b in file_batches([40 * mib, 3, 40 * mib, 5], cores=1)] == [
        [0],
        [1, 2],
        [3],
    ]
    assert file_batches([], cores=2) == []
    assert [list(b) for b in file_batches([0, 0], cores=2)] == [[0, 1]]  # empty files: one task


@pytest.mark.slow
def test_files_read_in_batches_on_a_cluster_give_every_result_and_the_first_error_in_order(
    tmp_path: Path,
) -> None:
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    names = ("a", "b", "c", "d", "e", "f", "bad", "h")
    sizes = [10, 10, 10, 10, 10, 1, 1, 28]
    files = [tmp_path / n for n in names]
    for f, size in zip(files, sizes, strict=True):
        f.write_bytes(b"x" * size)
    # On 2 workers the tasks hold 10 bytes: "f", "bad" and "h" are one task, which stops at
    # "bad" and returns f's size and bad's error.
    assert [list(b) for b in file_batches(sizes, cores=2)][-1] == [5, 6, 7]
    seen = []
    with pytest.raises(InputError, match="damaged"):
        for path, size in map_files(files, _size_or_error, Parallel(workers=2)):
            seen.append((path, size))
    assert seen == list(zip(files[:6], sizes[:6], strict=True))
    good = files[:6] + files[7:]
    assert list(map_files(good, _size_or_error, Parallel(workers=2))) == [
        (f, f.stat().st_size) for f in good
    ]


@pytest.mark.slow
def test_a_result_lost_from_shared_memory_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Something empties /dev/shm while the command reads (a cleaner, a full /tmpfs policy):
    # the result's files are gone when the command goes to map them.
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    from echo_view import spool

    if not spool.SHM.is_dir() or not sys.platform.startswith("linux"):
        pytest.skip("shared-memory spooling needs Linux's /dev/shm")
    files = [tmp_path / n for n in ("a", "b")]
    for f in files:
        f.write_bytes(b"x" * 10)
    load = spool.Spooled.load

    def lost(self: spool.Spooled) -> object:
        os.unlink(self.path + spool.ARRAYS)
        return load(self)

    monkeypatch.setattr(spool, "MIN_BYTES", 0)  # every result through shared memory
    monkeypatch.setattr(spool.Spooled, "load", lost)
    with pytest.raises(InputError) as caught:
        list(map_files(files, _size_or_error, Parallel(workers=2)))
    line = caught.value.one_line()
    assert line.startswith(f"{files[0]}: the columns a worker read from it were lost")
    assert "No such file" in line and line.endswith("(read the job again, or with --workers 1)")


def _entry(folder: Path, name: str, size: int, age_s: int) -> Path:
    path = folder / f"{name}.json.gz"
    path.write_bytes(b"x" * size)
    t = 1_700_000_000 - age_s
    os.utime(path, (t, t))
    return path


def test_the_graph_cache_drops_the_least_recently_used_graphs_past_its_cap(
    tmp_path: Path,
) -> None:
    old = _entry(tmp_path, "0" * 16, 400, 300)
    mid = _entry(tmp_path, "1" * 16, 400, 200)
    new = _entry(tmp_path, "abcdef0123456789", 400, 100)
    other = tmp_path / "notes.txt"
    other.write_bytes(b"y" * 4000)  # not a graph: never counted or removed
    # $ECHO_VIEW_CACHE may name a folder of the user's traces: an older, larger trace there
    # is not the cache's to remove (it once was, by its suffix).
    trace = _entry(tmp_path, "rank0", 4000, 400)
    # 1,200 bytes held, 900 allowed: the oldest goes (800 left), the rest stay.
    assert prune_cache(tmp_path, max_bytes=900) == 400
    assert not old.exists() and mid.exists() and new.exists() and other.exists()
    assert prune_cache(tmp_path, max_bytes=800) == 0
    assert prune_cache(tmp_path, max_bytes=0) == 800
    assert not mid.exists() and not new.exists() and other.exists() and trace.exists()


def test_the_graph_cache_follows_xdg_cache_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ECHO_VIEW_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "echo-view" / "graphs"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG rules say: ignore it
    assert cache_dir() == tmp_path / "home" / ".cache" / "echo-view" / "graphs"
    monkeypatch.setenv("ECHO_VIEW_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


def test_a_local_cluster_has_no_more_workers_than_files(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[object, object]] = []

    class Stop(Exception):
        pass

    def record(scheduler: object, workers: object) -> None:
        asked.append((scheduler, workers))
        raise Stop

    monkeypatch.setattr(loading, "dask_client", record)
    files = sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))[:3]
    for parallel in (Parallel(workers=8), Parallel(workers=2), Parallel(scheduler="tcp://h:1")):
        with pytest.raises(Stop):
            list(map_files(files, _size_or_error, parallel, sizes=[1, 1, 1]))
    assert asked[0] == (None, 3) and asked[1] == (None, 2) and asked[2][0] == "tcp://h:1"


def test_torch_that_cannot_load_is_not_called_missing() -> None:
    # Under `ulimit -v 500000` torch's shared library fails to map: "torch is not installed"
    # sent the user to install what they had.
    from echo_view.loading import torch_missing

    missing = torch_missing(ModuleNotFoundError("No module named 'torch'", name="torch"))
    assert missing.message == "tracing a config needs torch, which is not installed"
    broken = torch_missing(
        ImportError("libtorch_cpu.so: failed to map segment from shared object"), "tracing a script"
    )
    assert broken.message == (
        "tracing a script needs torch, which could not be loaded (libtorch_cpu.so: failed to map "
        "segment from shared object)"
    )
    assert "ulimit -v" in (broken.hint or "")


def test_a_graph_without_a_config_says_how_to_simulate_it(tmp_path: Path) -> None:
    doc = json.loads(
        gzip.decompress((SAMPLES / "configs/megatron-ci-small/tp1-pp2.graph.json.gz").read_bytes())
    )
    doc["config"] = {}
    doc["meta"]["script"] = "train.py"  # as `trace --script` writes it
    graph = tmp_path / "g.json.gz"
    graph.write_bytes(gzip.compress(json.dumps(doc).encode()))
    with pytest.raises(InputError, match="no workload config") as err:
        loading.load_workload(graph)
    assert '[model] script = "train.py"' in (err.value.hint or "")
