"""Short and qualified names of real kernel signatures, read from the shipped samples (and from
``../shared/data`` when it is there)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from echo_view.analysis.cxx_names import (
    demangle,
    is_cxx_signature,
    qualified_base,
    short_kernel_name,
)
from echo_view.loading import build_registry
from echo_view.model import EventKind
from tests.conftest import SAMPLES, shared_path


@cache
def kernel_names(path: Path) -> frozenset[str]:
    """Every kernel name of the job at ``path``, as its importer reads it."""
    job = build_registry().importer_for(path).read([path])
    out: set[str] = set()
    for trace in job.traces:
        ev = trace.events
        rows = np.unique(ev.name[ev.kind == int(EventKind.KERNEL)])
        out.update(trace.strings[int(i)] for i in rows.tolist())
    return frozenset(out)


def _one(path: Path, part: str) -> str:
    hits = sorted(n for n in kernel_names(path) if part in n)
    assert hits, f"no kernel of {path.name} contains {part!r}"
    return hits[0]


AFTER = SAMPLES / "nsys" / "mfu_2gpu_after.sqlite.gz"
INFER = SAMPLES / "nsys" / "h100_2gpu_1s.sqlite.gz"
DLRM = SAMPLES / "dlrm_kineto"
HTA = SAMPLES / "hta_nccl" / "nccl_data.json.gz"

#: (sample, a part of one of its kernel names, the short name). The first rows are the
#: ``<unnamed>`` kernels a cut at the first ``<`` turned into ``at::native::``.
TABLE = [
    (AFTER, "<unnamed>::vectorized_layer_norm_kernel<", "vectorized_layer_norm_kernel"),
    (AFTER, "<unnamed>::CatArrayBatchedCopy_vectorized<", "CatArrayBatchedCopy_vectorized"),
    (AFTER, "flash::flash_fwd_kernel<Flash_fwd_kernel_traits<", "flash_fwd_kernel"),
    (AFTER, "nvjet_tst_96x64_64x10_1x2_h_bz_bias_TNN", "nvjet_tst_96x64_64x10_1x2_h_bz_bias_TNN"),
    (INFER, "<unnamed>::softmax_warp_forward<float, float, float, (int)6", "softmax_warp_forward"),
    (INFER, "<unnamed>::where_kernel_impl(", "vectorized_elementwise_kernel<where_kernel_impl>"),
    (INFER, "<unnamed>::masked_fill_kernel(", "elementwise_kernel<masked_fill_kernel>"),
    (INFER, "ReduceOp<float, at::native::MeanOps<", "reduce_kernel<MeanOps>"),
    (INFER, "pow_tensor_scalar_kernel_impl<float, float>(at::TensorIteratorBase &, T2)::"
     "[lambda(float) (instance 1)]",
     "vectorized_elementwise_kernel<pow_tensor_scalar_kernel_impl>"),
    (DLRM, "::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>", "CatArrayBatchedCopy"),
    (DLRM, "elementwise_kernel<4, at::native::FillFunctor<float>",
     "vectorized_elementwise_kernel<FillFunctor>"),
    (DLRM, "unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(",
     "unrolled_elementwise_kernel<direct_copy_kernel_cuda>"),
    (DLRM, "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::"
     "BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor",
     "elementwise_kernel<MulFunctor>"),
    (DLRM, "ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<",
     "reduce_kernel<sum_functor>"),
    (DLRM, "ncclKernel_AllReduce_RING_LL_Sum_float(", "ncclKernel_AllReduce_RING_LL_Sum_float"),
    (DLRM, "void split_embedding_codegen_forward_unweighted_kernel<",
     "split_embedding_codegen_forward_unweighted_kernel"),
    (DLRM, "volta_sgemm_128x32_nt", "volta_sgemm_128x32_nt"),
    (HTA, "multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>",
     "multi_tensor_apply_kernel<BinaryOpScalarFunctor>"),
    (HTA, "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>",
     "Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align4>"),
    (HTA, "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolution",
     "Kernel<ImplicitGemmConvolution>"),
    (HTA, "(anonymous namespace)::max_pool_forward_nchw<float, float>", "max_pool_forward_nchw"),
]  # fmt: skip

DEEPSEEK = "deepseek-profile-data/train.json.gz"
#: Kernels of ``../shared/data`` (FlashAttention-3 and DeepEP in the DeepSeek profile).
SHARED_TABLE = [
    (DEEPSEEK, "cutlass::device_kernel<flash::FlashAttnBwd<", "device_kernel<FlashAttnBwd>"),
    (DEEPSEEK, "void flash::compute_attn_ws<Flash_fwd_kernel_traits<", "compute_attn_ws"),
    (DEEPSEEK, "_ZN2at6native54_GLOBAL__N__",
     "distribution_elementwise_grid_stride_kernel<normal_kernel>"),
    (DEEPSEEK, "void dpsk::ep::internode::dispatch<", "dispatch"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "part", "short"), TABLE, ids=lambda x: str(x)[:40])
def test_short_names_of_sample_kernels(path: Path, part: str, short: str) -> None:
    assert short_kernel_name(_one(path, part)) == short


@pytest.mark.parametrize(("rel", "part", "short"), SHARED_TABLE, ids=lambda x: str(x)[:40])
def test_short_names_of_shared_kernels(rel: str, part: str, short: str) -> None:
    name = _one(shared_path("data", rel), part)
    if name.startswith("_Z") and demangle(name) == name:
        pytest.skip("this platform's C++ runtime has no __cxa_demangle")
    assert short_kernel_name(name) == short


@pytest.mark.parametrize("path", [AFTER, INFER, DLRM, HTA], ids=lambda p: p.name)
def test_every_sample_kernel_keeps_its_own_name(path: Path) -> None:
    """No short name is a bare namespace, a parameter list or empty, and kernels with different
    identifiers never share one."""
    by_short: dict[str, set[str]] = {}
    for name in kernel_names(path):
        short = short_kernel_name(name)
        assert short and not short.endswith("::") and "(" not in short.split("<")[0], name
        assert "::" not in short, name
        ident = qualified_base(name).rsplit("::", 1)[-1]
        assert short.split("<")[0] == ident, name
        by_short.setdefault(short, set()).add(ident)
    assert all(len(idents) == 1 for idents in by_short.values())


def test_unnamed_namespace_kernels_are_separate_classes() -> None:
    names = [
        _one(AFTER, "<unnamed>::vectorized_layer_norm_kernel<"),
        _one(AFTER, "<unnamed>::CatArrayBatchedCopy_vectorized<"),
    ]
    assert [qualified_base(n) for n in names] == [
        "at::native::{anon}::vectorized_layer_norm_kernel",
        "at::native::{anon}::CatArrayBatchedCopy_vectorized",
    ]


def test_free_text_names_are_unchanged() -> None:
    for name in ("PyTorch Profiler (0)", "ProfilerStep#12", "aten::linear", "cudaLaunchKernel",
                 "<built-in method add of type object>", "## forward ##"):  # fmt: skip
        assert not is_cxx_signature(name) or name == "PyTorch Profiler (0)"
        assert short_kernel_name(name) == name
    assert qualified_base("Memset (Device)") == "Memset"


def test_demangle_leaves_plain_names_alone() -> None:
    assert demangle("volta_sgemm_128x32_nt") == "volta_sgemm_128x32_nt"
    name = _one(HTA, "_ZN19cutlass_cudnn_train6Kernel")
    # Not demangleable (the runtime rejects it): read its nested name instead.
    assert qualified_base(name) == "cutlass_cudnn_train::Kernel"


def test_any_text_gets_a_name_without_error() -> None:
    """Unbalanced, deeply nested or odd names (a trace is untrusted) still come back as text."""
    rng = np.random.default_rng(7)
    alphabet = [*"<>()[]{}:, _avoidk0123", "void ", "::", "operator()", "(int)", "_Z"]
    for _ in range(500):
        name = "".join(rng.choice(alphabet, size=int(rng.integers(0, 60))).tolist())
        assert isinstance(short_kernel_name(name), str)
        assert isinstance(qualified_base(name), str)
    deep = "void k<" * 20_000 + "float" + ">" * 20_000 + "(int)"
    assert short_kernel_name(deep) == "k"
    assert short_kernel_name("void k<" * 5000) == "k"  # never closed
    assert qualified_base("_Z") == "_Z" and short_kernel_name("_ZN3foo") == "foo"


@pytest.mark.parametrize("digits", [20, 5000])
def test_mangled_names_with_absurd_lengths(digits: int) -> None:
    """A length prefix too long to be one (past a slice's range, or Python's 4,300-digit int
    limit) ends the nested name instead of raising."""
    name = "_ZN" + "9" * digits + "abc"
    for f in (demangle, short_kernel_name, qualified_base):
        assert isinstance(f(name), str)
