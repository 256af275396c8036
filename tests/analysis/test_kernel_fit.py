"""Measured kernels with their launching ops' work: counting rules and linking on real traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from echo_view.analysis.kernel_fit import kernel_samples, launching_ops
from echo_view.analysis.kernel_ops import op_work
from echo_view.model import EventKind, Job
from echo_view.model.graph import OpClass
from importers.kineto import KinetoImporter
from tests.conftest import SAMPLES, shared_path

DLRM = SAMPLES / "dlrm_kineto"
SAMPLED = SAMPLES / "hta_sampled_128" / "sampled_rank-0.json.gz"
BF16 = "c10::BFloat16"


def _read(path: Path) -> Job:
    return KinetoImporter().read([path])


@pytest.mark.parametrize(
    ("name", "dims", "flops"),
    [
        ("aten::mm", [[512, 1024], [1024, 256]], 2.0 * 512 * 1024 * 256),
        # addmm: the bias adds one FLOP per output element.
        (
            "aten::addmm",
            [[256], [512, 1024], [1024, 256], [], []],
            2.0 * 512 * 1024 * 256 + 512 * 256,
        ),
        ("aten::bmm", [[8, 64, 32], [8, 32, 128]], 2.0 * 8 * 64 * 32 * 128),
        (
            "aten::baddbmm",
            [[8, 64, 128], [8, 64, 32], [8, 32, 128], [], []],
            2.0 * 8 * 64 * 32 * 128,
        ),
        # addbmm sums the batch of products into one [64, 128] output: same multiply-adds.
        ("aten::addbmm", [[64, 128], [8, 64, 32], [8, 32, 128], [], []], 2.0 * 8 * 64 * 32 * 128),
        ("aten::linear", [[4, 16, 1024], [256, 1024], [256]], 2.0 * 64 * 1024 * 256),
    ],
)
def test_gemm_flops_by_hand(name: str, dims: list[list[int]], flops: float) -> None:
    """The profiled op's FLOPs, counted by the catalogue the tracer uses too
    (echo_view.model.aten_ops), equal the hand count."""
    types = [BF16 if d else "Scalar" for d in dims]
    w = op_work(name, dims, types)
    assert w is not None and w.op_class == OpClass.GEMM and w.dtype == "bf16"
    assert w.flops == flops


def test_a_shape_no_gpu_holds_is_no_tensor() -> None:
    # [10^30, 10^30] operands were counted (calibrate compute fitted them: 2.9e14 % error).
    huge = 10**30
    assert op_work("aten::mm", [[huge, huge], [huge, huge]], [BF16, BF16]) is None
    assert op_work("aten::mm", [[1 << 24, 1 << 24], [1 << 24, 64]], [BF16, BF16]) is not None


def test_memory_op_bytes() -> None:
    # Out of place: both inputs read, the broadcast output written.
    w = op_work("aten::add", [[16, 1024], [1024], []], ["float", "float", "Scalar"])
    assert w is not None and w.op_class == OpClass.ELEMENTWISE
    assert w.nbytes == 4 * (16 * 1024 + 1024 + 16 * 1024)
    # In place: the first input is read and written back (the tracer's convention).
    w = op_work("aten::mul_", [[16, 1024], [16, 1024]], ["float", "float"])
    assert w is not None and w.nbytes == 4 * 3 * 16 * 1024
    # An overwrite writes its first argument without reading it.
    w = op_work("aten::fill_", [[16, 1024], []], ["float", "Scalar"])
    assert w is not None and w.nbytes == 4 * 16 * 1024
    # A conversion copy reads and writes each tensor in its own dtype.
    w = op_work("aten::copy_", [[8, 64], [8, 64], []], [BF16, "float", "Scalar"])
    assert w is not None and w.op_class == OpClass.COPY and w.nbytes == 8 * 64 * (2 + 4)
    # Layer norm writes y plus an fp32 mean and rstd per row.
    w = op_work("aten::native_layer_norm", [[32, 512], [], [512], [512], []],
                [BF16, "ScalarList", BF16, BF16, "Scalar"])  # fmt: skip
    assert w is not None and w.nbytes == 2 * (32 * 512 * 2 + 2 * 512) + 2 * 32 * 4


def test_attention_flops_read_the_causal_flag() -> None:
    dims = [[2, 128, 8, 64]] * 3 + [[]] * 6
    types = [BF16] * 3 + ["", "", "Scalar", "Scalar", "Scalar", "Scalar"]
    causal = ["", "", "", "", "", "128", "128", "0.", "True"]
    full = [*causal[:-1], "False"]
    a = op_work("aten::_flash_attention_forward", dims, types, causal)
    b = op_work("aten::_flash_attention_forward", dims, types, full)
    assert a is not None and b is not None and a.op_class == OpClass.ATTENTION
    assert b.flops == 2 * a.flops == 4.0 * 2 * 8 * 128 * 128 * 64


def test_uncountable_ops() -> None:
    assert op_work("aten::sum", [[4, 4]], ["float"]) is None  # output size needs the dims
    assert op_work("aten::mm", [[4, 4]], ["float"]) is None  # one matrix only
    assert op_work("aten::add", [[4, 3], [5]], ["float", "float"]) is None  # no broadcast
    assert op_work("aten::mul", [[], []], ["Scalar", "Scalar"]) is None


def test_dlrm_samples() -> None:
    """Eight V100 ranks (2023 PyTorch: kernels carry the correlation as External id, so ops
    are found by the launch's thread)."""
    job = KinetoImporter().read([DLRM])
    s = kernel_samples(job)
    assert len(job.traces) == 8 and len(s.sources) == 8
    assert s.devices == (("Tesla V100-SXM2-32GB", 34079899648),)
    st = s.stats
    # Ranks 1 and 3 lack the runtime launch of 64 kernels each: those stay unlinked.
    assert st.kernels == 2040 and st.linked == 2040 - 2 * 64
    assert st.ops_with_shapes == st.ops
    assert 0 < st.samples == len(s) < st.ops
    assert set(np.unique(s.trace)) == set(range(8))
    gemm = s.op_class == OpClass.GEMM
    assert np.count_nonzero(gemm) > 100
    assert {s.dtypes[i] for i in s.dtype[gemm]} == {"fp32"}  # Volta: no TF32
    assert np.all(s.measured_ns > 0) and np.all(s.kernels >= 1)
    # Each sample's time is the sum of the kernels its op launched.
    t = job.traces[0]
    work = np.flatnonzero(t.events.kind == EventKind.KERNEL)
    ops = launching_ops(t, work)
    total = {int(o): int(t.events.dur_ns[work][ops == o].sum()) for o in np.unique(ops)}
    mine = s.measured_ns[s.trace == 0]
    assert set(mine.tolist()) <= set(total.values())
    # Same shape key, same work.
    for key in np.unique(s.shape):
        m = s.shape == key
        assert len(np.unique(s.flops[m])) == 1 and len(np.unique(s.nbytes[m])) == 1


def test_tf32_gemms_are_recognised_by_kernel_name() -> None:
    """fp32 matrix products that ran cutlass tensor-op kernels computed in TF32."""
    s = kernel_samples(_read(SAMPLED))
    gemm = s.op_class == OpClass.GEMM
    dtypes = {s.dtypes[i] for i in s.dtype[gemm]}
    assert "tf32" in dtypes
    assert s.devices == (("", -1),)  # this sampled trace names no GPU


def test_external_id_and_thread_links_agree() -> None:
    """On a PyTorch 2.x trace both ways of finding a kernel's op give the same op."""
    t = _read(shared_path("data", "tracelens", "h100", "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"))
    trace = t.traces[0]
    work = np.flatnonzero(trace.events.kind == EventKind.KERNEL)
    by_ext = launching_ops(trace, work)
    by_thread = launching_ops(trace, work, use_external_id=False)
    both = (by_ext >= 0) & (by_thread >= 0)
    assert np.count_nonzero(both) > 1000
    assert np.array_equal(by_ext[both], by_thread[both])
    names = {trace.name(int(o)) for o in by_ext[by_ext >= 0]}
    assert {"aten::mm", "aten::addmm", "aten::_flash_attention_forward"} <= names


def test_trace_without_shapes() -> None:
    s = kernel_samples(_read(SAMPLES / "hta_nccl" / "nccl_data.json.gz"))
    assert s.stats.kernels > 0 and s.stats.ops_with_shapes == 0 and len(s) == 0
