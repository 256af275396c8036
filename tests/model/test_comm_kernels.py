"""NCCL kernel-name parsing on names seen in real traces."""

from __future__ import annotations

import pytest

from echo_view.model import CollectiveKind, is_comm_kernel, parse_comm_kernel_name

CASES = [
    (
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        CollectiveKind.ALL_REDUCE,
        "RING",
        "LL",
        "Sum",
        "float",
    ),
    (
        "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
        CollectiveKind.SEND_RECV,
        "RING",
        "SIMPLE",
        "Sum",
        "int8_t",
    ),
    (
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        CollectiveKind.ALL_GATHER,
        "RING",
        "LL",
        None,
        None,
    ),
    (
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        CollectiveKind.ALL_REDUCE,
        "RING",
        "LL",
        "Sum",
        "bf16",
    ),
    (
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL128",
        CollectiveKind.REDUCE_SCATTER,
        "RING",
        "LL128",
        "Sum",
        "f32",
    ),
    (
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
        CollectiveKind.SEND_RECV,
        None,
        None,
        None,
        None,
    ),
    (
        "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
        CollectiveKind.UNKNOWN,
        None,
        None,
        None,
        None,
    ),
    (
        "ncclKernel_Broadcast_RING_LL_Sum_int8_t",
        CollectiveKind.BROADCAST,
        "RING",
        "LL",
        "Sum",
        "int8_t",
    ),
]


@pytest.mark.parametrize(("name", "kind", "algo", "proto", "red", "dtype"), CASES)
def test_parse(
    name: str,
    kind: CollectiveKind,
    algo: str | None,
    proto: str | None,
    red: str | None,
    dtype: str | None,
) -> None:
    info = parse_comm_kernel_name(name)
    assert info is not None
    assert (info.collective, info.algorithm, info.protocol, info.reduction, info.dtype) == (
        kind,
        algo,
        proto,
        red,
        dtype,
    )


@pytest.mark.parametrize("name", ["volta_sgemm_128x64_nn", "Memcpy DtoD", "nccl", "my_ncclKernel"])
def test_non_nccl_names(name: str) -> None:
    assert parse_comm_kernel_name(name) is None


@pytest.mark.parametrize(
    ("name", "path", "operation"),
    [
        # From DeepSeek's published DeepSeek-V3 training profile (deepseek-ai/profile-data).
        (
            "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*, long*)",
            "internode",
            "dispatch",
        ),
        (
            "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*)",
            "internode",
            "combine",
        ),
        (
            "void dpsk::ep::internode::notify_dispatch<false, 8>(int const*, long*, int)",
            "internode",
            "notify_dispatch",
        ),
        (
            "void dpsk::ep::internode::cached_notify<false>(int, int, int, int, int*)",
            "internode",
            "cached_notify",
        ),
        # Upstream DeepEP's namespaces.
        ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)", "intranode", "dispatch"),
        (
            "void deep_ep::internode_ll::combine<7168, 9>(void*, void const*)",
            "low_latency",
            "combine",
        ),
    ],
)
def test_deepep_kernels_are_all_to_all_communication(name: str, path: str, operation: str) -> None:
    info = parse_comm_kernel_name(name)
    assert info is not None and is_comm_kernel(name)
    assert (info.collective, info.library, info.algorithm, info.operation) == (
        CollectiveKind.ALL_TO_ALL,
        "deepep",
        path,
        operation,
    )


@pytest.mark.parametrize(
    "name",
    [
        "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*)",
        "void deep_ep::internode_ll::clean_low_latency_buffer<32>(int*, int)",
        "void deep_ep::layout::get_dispatch_layout<256>(long const*)",
    ],
)
def test_deepep_local_work_is_not_communication(name: str) -> None:
    assert parse_comm_kernel_name(name) is None and not is_comm_kernel(name)
