"""Kernel classes from names (:func:`echo_view.sim.compute.classify_kernel`)."""

from __future__ import annotations

import pytest

from echo_view.model.workload import OP_CLASS_NAMES
from echo_view.sim.compute import classify_kernel


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
         "collective"),
        # DeepEP kernels of DeepSeek's DeepSeek-V3 training profile: communication, as
        # echo_view.model.comm_kernels says, not "other".
        ("void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*)", "collective"),
        ("void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*)",
         "collective"),
        ("void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*)", "collective"),
        # Its layout kernel is local work.
        ("void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*)", "other"),
        ("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel>"
         "(dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel::Params)", "gemm"),
        ("void flash::compute_attn_ws<Flash_fwd_kernel_traits<192, 128, 128, 12, 2>>()",
         "attention"),
        # cuBLAS's Hopper GEMMs (nsys mfu_2gpu_after: 52.4 ms of them) were "other", so
        # compute.scale.gemm moved nothing there.
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT", "gemm"),
        # cuDNN's batch norm and layout transforms were GEMMs (54% of hta_nccl's GEMM time).
        ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 32, true, 1>(float)",
         "normalization"),
        ("void cudnn::bn_fw_tr_1C11_singleread<float, 512, true, 1, 2, 0>(float)",
         "normalization"),
        ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true>(float const*)",
         "elementwise"),
        # Its convolutions stay GEMMs.
        ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(float)", "gemm"),
        ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int)", "gemm"),
    ],
)  # fmt: skip
def test_kernel_classes(name: str, cls: str) -> None:
    assert OP_CLASS_NAMES[classify_kernel(name)] == cls
