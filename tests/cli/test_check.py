"""``echo_view.cli.check``: each file checked where it is read (its findings in a report of its
own, merged in file order; an imported job's ranks checked one by one) reports byte for byte
what running every rule into one report over the whole input does; a damaged rank file among
many keeps its finding or its one-line error."""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from echo_view.cli import main
from echo_view.cli.check import _ENCODER, check_json_file, check_paths, expand
from echo_view.loading import SERIAL, read_job
from echo_view.validate import Report, check_job
from echo_view.validate.imported import check_rank, join_rank_checks
from echo_view.validate.render import render_report
from tests.cli.hostile_io import SAMPLES, refused
from tests.cli.many_ranks import DLRM, many_ranks

NSYS = SAMPLES / "nsys"


def _printed(report: Report) -> tuple[bytes, str]:
    """What ``check --json`` and ``check`` print of ``report``."""
    console = Console(file=io.StringIO(), width=120, highlight=False, soft_wrap=True)
    console.print(render_report(report, 3, []))
    return _ENCODER.encode(report.to_json()), console.file.getvalue()


def _whole(paths: list[Path], as_job: bool = False) -> Report:
    """Every rule into one report: each job's JSON files one after another then (for two or
    more) the cross-rank rules, or the imported job read whole."""
    report = Report()
    for job in expand(paths, as_job):
        if all(p.name.endswith((".json", ".json.gz")) for p in job.files):
            summaries = [check_json_file(p, report) for p in job.files]
            if len(summaries) > 1:
                check_job(summaries, report, job.name)
        else:
            whole = read_job(job.files)
            checks = [check_rank(t, report.selection, report.keep) for t in whole.traces]
            join_rank_checks(whole.head, checks, report, job.name)
    return report


@pytest.mark.parametrize(
    "name", ["dlrm_kineto", "hta_sampled_128", "hta_nccl", "many", "nsys", "nsys-job"]
)
def test_files_checked_apart_report_what_the_whole_input_does(name: str, tmp_path: Path) -> None:
    if name == "many":
        paths, as_job = [many_ranks(tmp_path / "many", 24)], False
    elif name == "nsys":
        paths, as_job = [NSYS / "h100_2gpu_1s.sqlite.gz"], False
    elif name == "nsys-job":
        paths = [NSYS / "mfu_2gpu_before.sqlite.gz", NSYS / "mfu_2gpu_after.sqlite.gz"]
        as_job = True
    else:
        paths, as_job = [SAMPLES / name], False
    apart = Report()
    check_paths(paths, apart, as_job, parallel=SERIAL)
    assert _printed(apart) == _printed(_whole(paths, as_job))
    assert apart.files and len(apart.files) == len(_whole(paths, as_job).files)


def test_each_file_is_merged_before_the_next_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[str] = []
    check_file = check_json_file
    merge = Report.merge

    def logged_check(path: Path, report: Report) -> object:
        steps.append("check")
        return check_file(path, report)

    def logged_merge(self: Report, other: Report) -> None:
        steps.append("merge")
        merge(self, other)

    monkeypatch.setattr("echo_view.cli.check.check_json_file", logged_check)
    monkeypatch.setattr(Report, "merge", logged_merge)
    report = Report()
    check_paths([DLRM], report, parallel=SERIAL)
    assert steps == ["check", "merge"] * 8
    assert [f.rank for f in report.files] == list(range(8))


def test_a_damaged_rank_file_among_many(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = many_ranks(tmp_path / "job", 12)
    text = (job / "rank5.json").read_bytes()
    (job / "rank5.json").write_bytes(text[: len(text) // 2])  # cut off mid-event
    assert main(["check", str(job), "--json", "--workers", "1"]) == 2
    out = capsys.readouterr().out
    assert f'"path":"{job}/rank5.json","form":"object"' in out and '"usable":false' in out
    assert out.count('"usable":false') == 1
    # An input over the inflation limit stops the check with one line naming the file.
    gz = tmp_path / "gz"
    gz.mkdir()
    for i in range(3):
        (gz / f"rank{i}.json.gz").write_bytes(gzip.compress((job / f"rank{i}.json").read_bytes()))
    err = refused(
        ["--max-inflated-bytes", "4096", "check", str(gz), "--workers", "1"],
        capsys,
        tmp_path,
        [gz],
        f"{gz}/rank0.json.gz",
    )
    assert "--max-inflated-bytes" in err


def test_json_report_on_a_file_name_that_is_not_utf8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job"
    job.mkdir()
    name = os.fsdecode(b"r0_\xff.json.gz")  # Python's surrogate escape: UTF-8 cannot encode it
    (job / name).write_bytes(min(DLRM.glob("*.json.gz")).read_bytes())
    assert main(["check", str(job), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["files"][0]["path"] == str(job / name)  # as info --json writes it: \udcff
    main(["info", str(job / name), "--json"])
    assert json.loads(capsys.readouterr().out)["source"] == str(job / name)


def test_fix_writes_only_json_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = min(DLRM.glob("*.json.gz"))
    for out in ("-", "fixed.txt", "fixed"):
        err = refused(
            ["check", str(src), "--fix", "-o", str(tmp_path / out)], capsys, tmp_path, [src], ""
        )
        assert (
            err
            == f"echo-view: error: cannot write a repaired trace to '{out}' (use .json or .json.gz)"
        )


def test_fix_writes_through_an_output_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = min(DLRM.glob("*.json.gz"))
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert main(["check", str(src), "--fix", "-o", str(link)]) == 0
    assert link.is_symlink() and real.read_bytes().startswith(b"{")
    # A link to a device or a pipe (what /dev/stdout is) is refused as what it leads to.
    link.unlink()
    link.symlink_to("/dev/null")
    refused(
        ["check", str(src), "--fix", "-o", str(link)], capsys, tmp_path, [src], "a character device"
    )
    assert link.is_symlink() and os.readlink(link) == "/dev/null"


def test_a_sub_directory_that_cannot_be_listed_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = tmp_path / "job"
    (job / "locked").mkdir(parents=True)
    (job / "rank0.json.gz").write_bytes(min(DLRM.glob("*.json.gz")).read_bytes())
    listdir = os.scandir

    def scandir(path: Any = ".") -> Any:
        # Root may list anything: refuse as a chmod 000 would for a user.
        if Path(path) == job / "locked":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return listdir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    err = refused(["check", str(job)], capsys, tmp_path, [job], "permission denied")
    assert err.startswith(f"echo-view: error: {job / 'locked'}: permission denied (")


def test_a_trace_of_a_folder_that_cannot_be_read_is_named_not_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A FIFO named as a rank file: skipped, the folder was checked without it (exit 0).
    shutil.copy(SAMPLES / "hta_sampled_128" / "sampled_rank-0.json.gz", tmp_path / "r0.json.gz")
    os.mkfifo(tmp_path / "r1.json.gz")
    assert main(["check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "r1.json.gz: not a regular file" in err and len(err.splitlines()) == 1, err


def test_show_must_not_be_negative(capsys: pytest.CaptureFixture[str]) -> None:
    # -1 was a slice from the end: "all but the last location" of each code.
    assert main(["check", "--show", "-1", str(SAMPLES / "hta_sampled_128")]) == 2
    assert capsys.readouterr().err == "echo-view: error: --show must be 0 or more, got -1\n"


def test_a_repaired_copy_takes_an_uppercase_extension(tmp_path: Path) -> None:
    # .JSON and .JSON.GZ were refused here while every other writer took them.
    src = sorted(DLRM.glob("*.json.gz"))[0]
    for name in ("FIX.JSON", "FIX.JSON.GZ"):
        out = tmp_path / name
        assert main(["check", str(src), "--fix", "-o", str(out)]) == 0
        head = out.read_bytes()[:2]
        assert (head == b"\x1f\x8b") == name.endswith(".GZ")


@pytest.mark.parametrize("sample", ["hta_sampled_128", "dlrm_kineto"])
def test_an_export_of_several_ranks_is_checked_across_its_ranks(
    sample: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An export holds every rank in one file, which the file rules read as one rank: the
    # cross-rank rules found nothing (no EV701 on 2 of 128 ranks, no EV708 straggler).
    def cross_rank(paths: list[str]) -> list[tuple[str, int, list[str]]]:
        capsys.readouterr()
        assert main(["check", *paths, "--json"]) == 0
        found = json.loads(capsys.readouterr().out)["findings"]
        return [
            (f["code"], f["count"], sorted(x["message"] for x in f["first"]))
            for f in found
            if f["code"].startswith("EV7")
        ]

    out = tmp_path / "export.json"
    assert main(["export", str(SAMPLES / sample), "-o", str(out)]) == 0
    expected = cross_rank([str(SAMPLES / sample)])
    assert expected and expected[0][0] == {"hta_sampled_128": "EV701"}.get(sample, "EV708")
    assert cross_rank([str(out)]) == expected
