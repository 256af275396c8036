"""``echo-view info``: JSON shape and consistency, table output, errors, progress; then the same
on the real samples once the Kineto importer is available."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from echo_view.cli import info
from echo_view.errors import EchoViewError, UsageError
from echo_view.formats import Progress, Registry, no_progress
from echo_view.model import (
    ClockAlignment,
    CollectiveKind,
    DeviceInfo,
    EventKind,
    Job,
    LaneKind,
    Trace,
    TraceBuilder,
)

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _rank(rank: int, lag: int, origin: int = 0) -> Trace:
    b = TraceBuilder(rank, source=f"rank{rank}.fake")
    b.devices.append(DeviceInfo(0, "NVIDIA H100 80GB HBM3"))
    cpu = b.lane(LaneKind.CPU_THREAD, 10, 10)
    s7 = b.gpu_stream(0, 7)
    s9 = b.gpu_stream(0, 9)
    for n, t0 in enumerate((origin, origin + 1000)):
        b.event(EventKind.USER_ANNOTATION, f"ProfilerStep#{n}", t0, 1000, cpu)
        for corr, (at, kind, name, lane, start, dur) in enumerate(
            [
                (10, EventKind.KERNEL, "gemm", s7, 100, 400),
                (20, EventKind.KERNEL, NCCL, s9, 300 + lag, 300),
                (30, EventKind.MEMCPY, "Memcpy DtoD (Device -> Device)", s7, 700, 50),
            ]
        ):
            c = 100 * n + corr
            b.event(EventKind.RUNTIME, "cudaLaunchKernel", t0 + at, 5, cpu, correlation=c)
            row = b.event(kind, name, t0 + start, dur, lane, correlation=c)
            if name == NCCL:
                b.collective(row, CollectiveKind.ALL_REDUCE, nbytes=1 << 20)
    return b.build()


class FakeImporter:
    """Stands in for a format: any ``*.fake`` path reads as a 2-rank job."""

    name = "fake"

    def sniff(self, path: Path) -> bool:
        return path.suffix == ".fake"

    def read(self, paths: Sequence[Path], progress: Progress = no_progress) -> Job:
        progress("reading", 0.5)
        traces = (_rank(0, 0), _rank(1, 150))
        return Job(traces, ClockAlignment("shared-host-clock", (0, 0), 1000), 2, "job.fake")


class OtherImporter(FakeImporter):
    name = "other"

    def sniff(self, path: Path) -> bool:
        return path.suffix == ".other"


def _registry() -> Registry:
    reg = Registry()
    reg.add_importer(FakeImporter())
    reg.add_importer(OtherImporter())
    return reg


def _run(
    capsys: pytest.CaptureFixture[str], registry: Registry, *argv: str | Path
) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    info.register(parser.add_subparsers())
    args = parser.parse_args(["info", *map(str, argv)])
    code = args.func(args, registry)
    return code, capsys.readouterr().out


def _check_consistent(doc: dict[str, Any]) -> None:
    cats = ("compute_ns", "exposed_comm_ns", "memory_ns", "idle_ns")
    for row in doc["ranks"]:
        if row["device"] is None:
            assert row["compute_ns"] is None
            continue
        assert row["steps"] == len(row["per_step"]) > 0
        for step in row["per_step"]:
            assert sum(step[c] for c in cats) == step["step_ns"]
            assert step["exposed_comm_ns"] <= step["comm_ns"]
            assert step["step_ns"] >= 0 and step["cpu_ns"] >= 0
            if step["gpu_span_ns"] is not None:
                assert step["gpu_span_ns"] == step["gpu_end_ns"] - step["cpu_start_ns"]
                # the window ends at the later of the CPU end and the GPU end
                end = step["window_start_ns"] + step["step_ns"]
                assert end == max(step["cpu_start_ns"] + step["cpu_ns"], step["gpu_end_ns"])
        total = row["total"]
        assert sum(total[c] for c in cats) == total["step_ns"]
        assert total["step_ns"] == sum(s["step_ns"] for s in row["per_step"])
        assert abs(row["step_ns"] - total["step_ns"] / row["steps"]) <= 0.5
    timed = [r for r in doc["ranks"] if r["steps"]]
    if timed:
        slow = max(r["step_ns"] for r in timed)
        assert doc["slowest_rank"]["step_ns"] == slow


def test_json_on_hand_built_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.fake"
    path.write_text("")
    code, out = _run(capsys, _registry(), path, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["schema"] == "echo-view.info/1"
    assert doc["job"]["ranks"] == [0, 1]
    assert doc["job"]["world_size"] == 2
    assert doc["job"]["clock_alignment"]["method"] == "shared-host-clock"
    assert doc["job"]["collectives"] == {"total": 4, "by_kind": {"all_reduce": 4}}
    assert doc["job"]["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    _check_consistent(doc)
    r0, r1 = doc["ranks"]
    # rank 0, each step [t0, t0+1000): gemm [100,500), NCCL [300,600), copy [700,750)
    #   compute 400, comm 300, exposed [500,600) = 100, memory 50, idle 1000-550 = 450
    assert (r0["compute_ns"], r0["comm_ns"], r0["exposed_comm_ns"]) == (400, 300, 100)
    assert (r0["memory_ns"], r0["idle_ns"], r0["step_ns"]) == (50, 450, 1000)
    # rank 1: NCCL [450,750) -> exposed [500,750) = 250; the copy [700,750) is under NCCL.
    assert (r1["exposed_comm_ns"], r1["memory_ns"], r1["idle_ns"]) == (250, 0, 350)
    assert doc["slowest_rank"] == {"rank": 0, "device": 0, "step_ns": 1000}
    assert doc["top_kernels"][0] == {"name": "gemm", "count": 4, "total_ns": 1600, "ranks": 2}
    assert doc["top_collectives"] == [
        {"kind": "all_reduce", "count": 4, "total_ns": 1200, "bytes": 4 << 20}
    ]


def test_table_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.fake"
    path.write_text("")
    code, out = _run(capsys, _registry(), path)
    assert code == 0
    for text in ("Per rank", "exposed comm", "shared-host-clock", "all_reduce", "gemm"):
        assert text in out
    assert "slowest: rank 0" in out


def test_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = tmp_path / "a.fake"
    b = tmp_path / "b.other"
    a.write_text("")
    b.write_text("")
    with pytest.raises(UsageError, match="one format"):
        _run(capsys, _registry(), a, b)
    with pytest.raises(EchoViewError, match="no such file"):
        _run(capsys, _registry(), tmp_path / "missing.fake")
    with pytest.raises(UsageError, match="--top"):
        _run(capsys, _registry(), a, "--top", "-1")


def _kineto_registry() -> Registry:
    from importers import kineto

    reg = Registry()
    reg.add_importer(kineto.KinetoImporter())
    return reg


@pytest.mark.parametrize(
    ("paths", "ranks"),
    [
        (sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz")), list(range(8))),
        ([SAMPLES / "hta_nccl" / "nccl_data.json.gz"], [0]),
        (sorted((SAMPLES / "hta_sampled_128").glob("*.json.gz")), [0, 1]),
    ],
    ids=["dlrm_kineto", "hta_nccl", "hta_sampled_128"],
)
def test_json_on_samples(
    paths: list[Path], ranks: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _run(capsys, _kineto_registry(), *paths, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["job"]["ranks"] == ranks
    assert doc["job"]["events"] > 0
    assert doc["job"]["collectives"]["total"] > 0
    _check_consistent(doc)
    for row in doc["ranks"]:
        assert row["step_rule"] in ("trace", "profiler_step")
        assert not row["steps_detected"]
        # NCCL kernels run in every rank's steps in these jobs.
        assert row["comm_ns"] > 0 and row["compute_ns"] > 0


def test_table_on_samples(capsys: pytest.CaptureFixture[str]) -> None:
    paths = sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))
    code, out = _run(capsys, _kineto_registry(), *paths)
    assert code == 0
    assert "Per rank" in out and "ranks 0-7" in out
    assert "8 GPUs with work: Tesla V100-SXM2-32GB\n" in out


def test_gpu_models_are_counted_not_listed_by_device_id() -> None:
    """Device ids repeat across ranks (every rank's GPU may be GPU 0), so the line counts the
    GPUs per model name; the separate-runs directory of two 2-GPU Nsight captures listed
    "GPU 0, GPU 1" for 4 GPUs."""
    from echo_view.cli.info import _models

    def dev(rank: int, index: int, name: str | None) -> dict[str, object]:
        return {"rank": rank, "index": index, "name": name}

    assert _models([]) == "none"
    assert _models([dev(r, 0, "H100") for r in range(4)]) == "H100"
    assert _models([dev(r, r % 2, None) for r in range(4)]) == "4 unnamed"
    mixed = [dev(0, 0, "H100"), dev(1, 0, "A100"), dev(2, 0, "H100"), dev(3, 1, None)]
    assert _models(mixed) == "1 x A100, 2 x H100, 1 unnamed"
    assert _models([dev(0, 0, "[bold]x")]) == "\\[bold]x"  # markup shown as text
    many = [dev(r, 0, None) for r in range(1200)] + [dev(1200, 0, "H100")]
    assert _models(many) == "1 x H100, 1,200 unnamed"


def test_main_errors_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from echo_view.cli import main

    assert main(["info", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such file" in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [\n')
    assert main(["info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err


def test_main_json_on_a_directory(capsys: pytest.CaptureFixture[str]) -> None:
    from echo_view.cli import main

    assert main(["info", "--json", str(SAMPLES / "dlrm_kineto")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["job"]["ranks"] == list(range(8))
    _check_consistent(doc)


@pytest.mark.parametrize("sample", ["dlrm_kineto", "hta_nccl", "hta_sampled_128"])
def test_rank_by_rank_prints_what_the_whole_job_gives(
    sample: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``info`` summarises each rank as it is read and drops its events; the text and JSON are
    byte for byte those of summarising the whole job read at once."""
    from echo_view.analysis.summary import summarize
    from echo_view.cli import main
    from echo_view.cli.comm import console
    from echo_view.formats import json_text
    from echo_view.loading import read_job

    paths = sorted((SAMPLES / sample).glob("*.json.gz"))
    whole = summarize(read_job(paths))
    assert main(["info", *map(str, paths), "--json", "--workers", "1"]) == 0
    assert capsys.readouterr().out == json_text(whole.to_json())
    assert main(["info", *map(str, paths), "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    info.render(whole, console(), title=info._title(paths))
    assert printed == capsys.readouterr().out
    assert f"ranks {info._ranks_text(whole.job.ranks)}" in printed


def test_steps_before_the_clock_origin_keep_their_gpu_span(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A capture whose clock puts every step at negative times (an Nsight export shifted by
    # its session start) read gpu_span_ns null: a negative GPU end was taken for "none".
    class Shifted(FakeImporter):
        name = "shifted"

        def sniff(self, path: Path) -> bool:
            return path.suffix == ".shifted"

        def read(self, paths: Sequence[Path], progress: Progress = no_progress) -> Job:
            clock = ClockAlignment("shared-host-clock", (0,), 1000)
            return Job((_rank(0, 0, -70_000_000_000),), clock, 1, "job.shifted")

    reg = Registry()
    reg.add_importer(Shifted())
    path = tmp_path / "job.shifted"
    path.write_text("")
    code, out = _run(capsys, reg, path, "--json")
    assert code == 0
    doc = json.loads(out)
    steps = doc["ranks"][0]["per_step"]
    assert steps and all(s["gpu_end_ns"] < 0 for s in steps)
    assert all(s["gpu_span_ns"] == s["gpu_end_ns"] - s["cpu_start_ns"] > 0 for s in steps)
    _check_consistent(doc)
