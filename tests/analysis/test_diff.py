"""``diff_jobs``: hand-computed two-rank jobs, alignment rules, the reference side, kernel classes,
and a predicted-vs-measured pair on the real DLRM sample."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from echo_view.analysis.diff import (
    SCHEMA,
    UNRELATED_BELOW,
    diff_jobs,
    kernel_class,
    kernel_similarity,
    rank_names,
)
from echo_view.errors import UsageError
from echo_view.model import (
    ClockAlignment,
    CollectiveKind,
    EventKind,
    Job,
    LaneKind,
    Trace,
    TraceBuilder,
)

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "void cutlass::Kernel<cutlass_80_gemm>(Params)"
DLRM = Path(__file__).resolve().parents[2] / "samples" / "dlrm_kineto"


def _rank(rank: int, steps: list[int], gemm_ns: int, comm_ns: int) -> Trace:
    """Per step (1000 ns apart, CPU span 400 ns): a GEMM at +0 and an all-reduce at +100 on
    another stream, both launched at the step start."""
    b = TraceBuilder(rank)
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    s7, s9 = b.gpu_stream(0, 7), b.gpu_stream(0, 9)
    g = b.group("dp", (0, 1))
    for i, n in enumerate(steps):
        t = 1000 * i
        b.event(EventKind.USER_ANNOTATION, f"ProfilerStep#{n}", t, 400, cpu)
        b.step(n, t, t + 400)
        b.event(EventKind.RUNTIME, "cudaLaunchKernel", t, 1, cpu, correlation=10 * i + 1)
        b.event(EventKind.KERNEL, GEMM, t, gemm_ns, s7, correlation=10 * i + 1)
        b.event(EventKind.RUNTIME, "cudaLaunchKernel", t + 1, 1, cpu, correlation=10 * i + 2)
        k = b.event(EventKind.KERNEL, NCCL, t + 100, comm_ns, s9, correlation=10 * i + 2)
        b.collective(k, CollectiveKind.ALL_REDUCE, nbytes=1 << 20, group=g, seq=i)
    return b.build()


def _job(gemm_ns: int, comm_ns: int, steps: list[int], predicted: bool = False) -> Job:
    traces = (_rank(0, steps, gemm_ns, comm_ns), _rank(1, steps, gemm_ns, comm_ns))
    return Job(traces, ClockAlignment("none", (0, 0), 0), 2, f"g{gemm_ns}", predicted)


def test_identical_jobs_match() -> None:
    a = _job(200, 200, [3, 4])
    d = diff_jobs(a, a)
    assert d.verdict[0] == "match"
    assert d.error_pct == 0.0
    assert all(r.step.delta_ns == 0 and r.step_alignment == "number" for r in d.ranks)
    assert all(p.delta_ns == 0 for p in d.categories.values())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"top": -1}, "top must be a whole number 0 or more, got -1"),  # it dropped a row
        ({"top": 2.5}, "got 2.5"),  # a TypeError from slicing
        ({"tolerance_pct": -1}, "from 0 to 1,000,000, got -1"),  # "B is 0.0% faster"
        ({"tolerance_pct": float("nan")}, "got nan"),
        ({"tolerance_pct": True}, "got True"),  # read as 1% (top=True was refused)
    ],
)
def test_bad_arguments_are_usage_errors(kwargs: dict[str, Any], message: str) -> None:
    a = _job(200, 200, [3, 4])
    with pytest.raises(UsageError, match=re.escape(message)):
        diff_jobs(a, a, **kwargs)


def test_hand_computed_step_time_categories_and_kernels() -> None:
    # A: GEMM [0,200) comm [100,300): window = max(CPU end 400, GPU end 300) = 400.
    # compute 200, comm 200, exposed comm 100 (200..300), idle 100 (300..400).
    # B: GEMM [0,600): window 600; compute 600, comm 200 all hidden, idle 0.
    a = _job(200, 200, [3, 4])
    b = _job(600, 200, [3, 4], predicted=True)
    d = diff_jobs(a, b)
    assert [r.rank for r in d.ranks] == [0, 1]
    r0 = d.ranks[0]
    assert (r0.step.a_ns, r0.step.b_ns) == (400, 600)
    assert r0.steps_a == r0.steps_b == (3, 4)
    cats = {c: (p.a_ns, p.b_ns) for c, p in r0.categories.items()}
    assert cats == {
        "compute": (200, 600),
        "comm": (200, 200),
        "exposed_comm": (100, 0),
        "memory": (0, 0),
        "idle": (100, 0),
    }
    assert d.step_time.a_ns == 400 and d.step_time.b_ns == 600
    assert not d.reference_is_b  # B is the predicted one: A is the reference
    assert d.error_pct == pytest.approx(50.0)
    code, text = d.verdict
    assert code == "b_slower" and "50.0% slower" in text
    # Kernel classes per step over both ranks: GEMM 2 x 200 -> 2 x 600.
    top = d.kernels[0]
    assert top.name == "cutlass::Kernel"
    assert (top.time.a_ns, top.time.b_ns, top.a_count, top.b_count) == (400, 1200, 2, 2)
    assert d.kernels[1].name == "nccl:all_reduce" and d.kernels[1].time.delta_ns == 0
    assert [c.name for c in d.collectives] == ["all_reduce x2 1.0 MiB"]
    assert d.collectives[0].time.a_ns == 400


def test_a_small_change_is_not_read_as_zero() -> None:
    # With --tolerance 0, a step 0.05% longer read "B is 0.0% slower than A (+0.0%)".
    d = diff_jobs(_job(200_000, 200_000, [1]), _job(200_200, 200_000, [1]), tolerance_pct=0)
    code, text = d.verdict
    assert d.step_time.delta_pct() == pytest.approx(0.05, rel=0.01)
    assert code == "b_slower" and text.startswith("B is 0.05% slower than A")
    assert "(+0.05%)" in text


def test_a_step_of_no_time_is_no_data_on_either_side() -> None:
    # A 0 ns B step read "B is 100.0% faster than A"; a 0 ns A already gave no verdict.
    def zero(rank: int) -> Trace:
        b = TraceBuilder(rank)
        b.event(EventKind.KERNEL, GEMM, 50, 0, b.gpu_stream(0, 7))
        return b.build()

    z = Job((zero(0), zero(1)), ClockAlignment("none", (0, 0), 0), 2, "zero")
    a = _job(200, 200, [1])
    assert diff_jobs(a, z).verdict == ("no_data", "B has no step time to compare against")
    assert diff_jobs(z, a).verdict == ("no_data", "A has no step time to compare against")


def test_a_rank_on_two_gpus_has_two_named_rows() -> None:
    # One process driving GPUs 0 and 1: two rows, both read "r0" (Ranks tab, step bars, the
    # command's per-rank table).
    def two_gpus(scale: int) -> Trace:
        b = TraceBuilder(0)
        cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
        b.event(EventKind.USER_ANNOTATION, "ProfilerStep#1", 0, 400, cpu)
        b.step(1, 0, 400)
        for dev in (0, 1):
            b.event(EventKind.KERNEL, GEMM, 10, 100 * scale * (dev + 1), b.gpu_stream(dev, 7))
        return b.build()

    a, b = (Job((two_gpus(s),), ClockAlignment("none", (0,), 0), 1, f"s{s}") for s in (1, 2))
    d = diff_jobs(a, b)
    assert [(r.rank, r.a_device, r.b_device) for r in d.ranks] == [(0, 0, 0), (0, 1, 1)]
    assert rank_names(d.ranks) == ["0 gpu0", "0 gpu1"]
    assert rank_names(diff_jobs(_job(200, 200, [1]), _job(200, 200, [1])).ranks) == ["0", "1"]
    assert rank_names([replace(d.ranks[1], b_device=None), d.ranks[0]]) == ["0 gpu1/gpu-", "0 gpu0"]


def test_reference_is_the_measured_side() -> None:
    measured = _job(200, 200, [1])
    predicted = _job(600, 200, [1], predicted=True)
    d = diff_jobs(predicted, measured)
    assert d.reference_is_b
    assert d.error_pct == pytest.approx(100 * 200 / 400)
    assert d.to_json()["reference"] == "b"
    assert d.verdict[0] == "b_faster"


def test_steps_pair_by_order_when_numbers_differ() -> None:
    a = _job(200, 200, [10, 11])
    b = _job(200, 200, [0, 1, 2])
    d = diff_jobs(a, b)
    assert d.ranks[0].step_alignment == "order"
    assert d.ranks[0].steps_a == (10, 11) and d.ranks[0].steps_b == (0, 1)
    assert any("by order" in n for n in d.notes)


def test_ranks_in_one_job_only_are_noted() -> None:
    a = _job(200, 200, [1])
    b = Job((a.traces[0],), ClockAlignment("none", (0,), 0), 1, "one")
    d = diff_jobs(a, b)
    assert [r.rank for r in d.ranks] == [0]
    assert d.notes[0] == "ranks only in A (left out): [1]"


def test_json_keys_are_stable() -> None:
    d = diff_jobs(_job(200, 200, [1]), _job(300, 200, [1], predicted=True)).to_json()
    assert list(d) == [
        "schema",
        "a",
        "b",
        "reference",
        "step_time",
        "ranks",
        "categories",
        "kernels",
        "collectives",
        "verdict",
        "notes",
        "kernel_similarity",
        "warnings",
    ]
    assert d["schema"] == SCHEMA
    assert set(d["step_time"]) == {
        "a_ns",
        "b_ns",
        "delta_ns",
        "delta_pct",
        "error_pct",
        "slowest_rank_a",
        "slowest_rank_b",
    }
    assert set(d["ranks"][0]) == {
        "rank",
        "a_device",
        "b_device",
        "steps_a",
        "steps_b",
        "step_alignment",
        "step",
        "categories",
    }
    assert set(d["categories"]) == {"compute", "comm", "exposed_comm", "memory", "idle"}
    assert set(d["kernels"][0]) == {
        "name",
        "a_ns",
        "b_ns",
        "delta_ns",
        "delta_pct",
        "error_pct",
        "a_count",
        "b_count",
    }
    assert set(d["verdict"]) == {"code", "text", "tolerance_pct"}


def test_kernel_classes() -> None:
    assert kernel_class("void at::native::vectorized_elementwise_kernel<4, F>(int, F)") == (
        "at::native::vectorized_elementwise_kernel"
    )
    assert kernel_class("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)") == (
        "nccl:send_recv"
    )
    assert kernel_class("Memset (Device)") == "Memset"
    assert kernel_class("void at::native::(anonymous namespace)::k<float>(float*)") == (
        "at::native::{anon}::k"
    )
    assert kernel_class("sm80_xmma_gemm_f32f32") == "sm80_xmma_gemm_f32f32"
    # Nsight's spelling of an anonymous namespace is no template argument list.
    assert kernel_class("void at::native::<unnamed>::k<float, (bool)0>(int, T2)") == (
        "at::native::{anon}::k"
    )


def stretch_gpu(trace: Trace, factor: float) -> Trace:
    """The trace with every GPU kernel ``factor`` times longer (starts unchanged)."""
    ev = trace.events
    dur = np.asarray(ev.dur_ns).copy()
    k = trace.mask(EventKind.KERNEL)
    dur[k] = np.round(dur[k] * factor).astype(np.int64)
    events = replace(ev, dur_ns=dur)
    return replace(trace, events=events)


def test_dlrm_measured_vs_a_perturbed_prediction() -> None:
    """The real 8-rank job against a 'prediction' made here by stretching its kernels 1.3x
    (used until a simulated job of the sample is part of the test data)."""
    from importers.kineto import KinetoImporter

    measured = KinetoImporter().read([DLRM])
    predicted = Job(
        tuple(stretch_gpu(t, 1.3) for t in measured.traces),
        measured.alignment,
        measured.world_size,
        "stretched",
        predicted=True,
    )
    d = diff_jobs(measured, predicted)
    assert [r.rank for r in d.ranks] == list(range(8))
    assert all(r.steps_a == r.steps_b and r.step_alignment == "number" for r in d.ranks)
    assert all(r.step.b_ns >= r.step.a_ns for r in d.ranks)
    assert d.categories["compute"].delta_ns > 0 and d.categories["comm"].delta_ns > 0
    ratio = [k.time.b_ns / k.time.a_ns for k in d.kernels if k.time.a_ns > 10_000]
    assert ratio and all(r == pytest.approx(1.3, rel=0.02) for r in ratio)
    # The step window ends with the CPU's ProfilerStep on these ranks, so longer kernels fill
    # idle time rather than lengthening the step.
    assert d.categories["idle"].delta_ns < 0
    assert d.error_pct is not None and d.error_pct >= 0


def test_kernel_similarity_is_a_weighted_jaccard() -> None:
    a = {"gemm": [(300, 3, 1)], "nccl": [(100, 1, 1)]}
    b = {"gemm": [(200, 2, 1), (100, 1, 1)], "copy": [(100, 1, 1)]}
    # min: gemm 300, nccl 0, copy 0 = 300; max: gemm 300 + nccl 100 + copy 100 = 500
    assert kernel_similarity(a, b) == pytest.approx(0.6)
    assert kernel_similarity(a, a) == 1.0 and kernel_similarity({}, {}) is None


def test_unrelated_jobs_are_warned_about() -> None:
    a = _job(200, 200, [1, 2])
    assert diff_jobs(a, _job(210, 200, [1, 2])).warnings == []  # the same job, a bit slower
    one = Job((a.traces[0],), ClockAlignment("none", (0,), 0), 1, "one")
    (w,) = diff_jobs(a, one).warnings
    assert w.startswith("A and B look like different jobs: A has 2 rank(s), B 1")
    # Same ranks and steps, other work: no GEMM time, 4.5x the all-reduce (200/1100 alike).
    other = Job(tuple(_rank(r, [1, 2], 0, 900) for r in (0, 1)), a.alignment, 2, "other", False)
    d = diff_jobs(a, other)
    assert d.kernel_similarity is not None and d.kernel_similarity < UNRELATED_BELOW
    (w,) = d.warnings
    assert "GPU time per kernel class is" in w and "weighted Jaccard" in w
    # A prediction names kernels its own way: only the rank count is compared then.
    assert diff_jobs(a, Job(other.traces, a.alignment, 2, "p", True)).warnings == []


def test_dlrm_against_another_sample_is_unrelated() -> None:
    from importers.kineto import KinetoImporter

    dlrm = KinetoImporter().read([DLRM])
    hta = KinetoImporter().read([DLRM.parent / "hta_nccl" / "nccl_data.json.gz"])
    d = diff_jobs(dlrm, hta)
    assert d.kernel_similarity is not None and d.kernel_similarity < 0.05
    assert len(d.warnings) == 1 and "A has 8 rank(s), B 1" in d.warnings[0]
    assert diff_jobs(dlrm, dlrm).kernel_similarity == 1.0
