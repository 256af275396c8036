""":mod:`echo_view.cli.guard` through the real CLI: no command writes onto any of its inputs
(whatever the spelling, hard links and files inside an input directory included, and a config's
cached graph), and special files are refused before anything opens them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from echo_view.cli import main
from tests.cli.hostile_io import CONFIGS, DLRM, fingerprint, listing, refused, run_cli


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """Two real Kineto rank files in a job directory."""
    d = tmp_path / "job"
    d.mkdir()
    for src in DLRM[:2]:
        shutil.copy(src, d / src.name)
    return d


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A real workload config with its traced graph beside it."""
    for suffix in (".toml", ".graph.json.gz"):
        shutil.copy(CONFIGS / f"tp1-pp4{suffix}", tmp_path / f"tp1-pp4{suffix}")
    return tmp_path / "tp1-pp4.toml"


def test_simulate_onto_its_trace(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = next(job.iterdir())
    argv = ["simulate", str(trace), "-o", str(trace)]
    refused(argv, capsys, job.parent, [job], "the output is also an input")


def test_export_onto_a_rank_file_found_in_the_input_directory(
    job: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rank = sorted(job.iterdir())[1]
    spelled = job / ".." / job.name / rank.name
    err = refused(["export", str(job), "-o", str(spelled)], capsys, job.parent, [job], "also")
    assert f"also an input ({rank})" in err


def test_a_new_output_inside_an_input_folder(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It was written there, and the folder then failed to load: "two files claim rank 0".
    (job / "sub").mkdir()
    for out in (job / "merged.json", job / "sub" / "merged.json", job / ".." / job.name / "x.json"):
        err = refused(["export", str(job), "-o", str(out)], capsys, job.parent, [job], "input")
        assert f"the output would go into the input folder {str(job)!r}" in err
    err = refused(
        ["calibrate", "compute", str(job), "-o", str(job / "c.toml")], capsys, job.parent, [job],
        "the output would go into the input folder",
    )  # fmt: skip
    assert main(["export", str(job), "-o", str(job.parent / "merged.json")]) == 0


def test_hard_and_symbolic_links_to_an_input(job: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = next(job.iterdir())
    hard, soft = job.parent / "hard.json.gz", job.parent / "soft.json.gz"
    os.link(trace, hard)
    soft.symlink_to(trace)
    for out in (hard, soft):
        argv = ["export", str(trace), "-o", str(out)]
        refused(argv, capsys, job.parent, [job], "also an input")
        argv = ["check", str(trace), "--fix", "-o", str(out)]
        refused(argv, capsys, job.parent, [job], "also an input")


def test_simulate_onto_the_configs_cached_graph(
    config: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    beside = config.with_name("tp1-pp4.graph.json.gz")
    argv = ["simulate", str(config), "-o", str(beside)]
    refused(argv, capsys, tmp_path, [config, beside], "also an input")
    cache = tmp_path / "cache"
    cache.mkdir()
    cached = cache / "0123456789abcdef.json.gz"
    shutil.copy(beside, cached)
    monkeypatch.setenv("ECHO_VIEW_CACHE", str(cache))
    argv = ["simulate", str(config), "-o", str(cached)]
    refused(argv, capsys, tmp_path, [config, beside, cache], "also an input")


def test_outputs_that_are_directories_or_lack_a_directory(
    job: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = next(job.iterdir())
    argv = ["export", str(trace), "-o", str(job)]
    refused(argv, capsys, job.parent, [job], "the output is a directory")
    argv = ["export", str(trace), "-o", str(job.parent / "missing" / "out.json")]
    refused(argv, capsys, job.parent, [job], "does not exist")


def test_directories_where_a_file_is_needed(
    job: Path, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(job.parent / "out.toml")
    for argv in (
        ["comm", "all_reduce", "--bytes", "1M", "--ranks", "8", "--model", str(job)],
        ["calibrate", "comm", str(job), "-o", out],
        ["simulate", str(config), "--compute", str(job)],
        ["trace", str(job), "-o", str(job.parent / "g.json")],
    ):
        refused(argv, capsys, job.parent, [job, config], f"{job}: is a directory, not a file")


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "{fifo}"],
        ["info", "{fifo}"],
        ["simulate", "{fifo_toml}"],
        ["calibrate", "comm", "{fifo}", "-o", "{tmp}/comm.toml"],
        ["comm", "all_reduce", "--bytes", "1M", "--ranks", "8", "--model", "{fifo}"],
        ["simulate", "{config}", "--set", "interference={fifo}"],
        ["info", "{zero}"],
        ["export", "{urandom}", "-o", "{tmp}/out.json"],
    ],
)
def test_special_files_are_refused_without_blocking(
    argv: list[str], tmp_path: Path, config: Path
) -> None:
    names = {
        "fifo": tmp_path / "trace.json",
        "fifo_toml": tmp_path / "config.toml",
        "zero": tmp_path / "zero.json.gz",
        "urandom": tmp_path / "rand.json",
    }
    os.mkfifo(names["fifo"])
    os.mkfifo(names["fifo_toml"])
    names["zero"].symlink_to("/dev/zero")
    names["urandom"].symlink_to("/dev/urandom")
    fmt = {**{k: str(v) for k, v in names.items()}, "tmp": str(tmp_path), "config": str(config)}
    before, listed = fingerprint(config), listing(tmp_path)
    proc = run_cli([a.format(**fmt) for a in argv], timeout=120)  # a hang fails here
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "not a regular file" in proc.stderr
    assert fingerprint(config) == before and listing(tmp_path) == listed
