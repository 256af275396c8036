"""NCCL kernel-name parsing on names seen in real traces."""

from __future__ import annotations

import pytest

from echo_view.model import CollectiveKind, parse_nccl_kernel_name

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
    info = parse_nccl_kernel_name(name)
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
    assert parse_nccl_kernel_name(name) is None
