"""The collective catalogue: one row per kind, names, bus factors, and what reads it."""

from __future__ import annotations

import pytest

from echo_view.model.collectives import (
    COLLECTIVES,
    collective,
    collective_in_text,
    collective_kind_from_name,
)
from echo_view.model.kinds import CollectiveKind as K


def test_every_kind_has_exactly_one_row() -> None:
    assert sorted(c.kind for c in COLLECTIVES) == sorted(K)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("allreduce", K.ALL_REDUCE),
        ("AllReduce", K.ALL_REDUCE),
        ("nccl:all_reduce", K.ALL_REDUCE),
        ("c10d::allreduce_", K.ALL_REDUCE),
        ("_allgather_base", K.ALL_GATHER),
        ("allgather_into_tensor_coalesced", K.ALL_GATHER),
        ("ReduceScatter", K.REDUCE_SCATTER),
        ("reduce_scatter_tensor", K.REDUCE_SCATTER),
        ("all_to_all", K.ALL_TO_ALL),
        ("alltoallv", K.ALL_TO_ALL),
        ("Bcast", K.BROADCAST),  # ncclBcast
        ("SendRecv", K.SEND_RECV),
        ("send", K.SEND),
        ("recv", K.RECV),
        # PyTorch's dispatcher ops (the script tracer) and functional collectives (DTensor).
        ("c10d::_allgather_base_", K.ALL_GATHER),
        ("c10d::_reduce_scatter_base_", K.REDUCE_SCATTER),
        ("all_gather_into_tensor", K.ALL_GATHER),
        ("all_gather_into_tensor_out", K.ALL_GATHER),
        ("all_reduce_coalesced", K.ALL_REDUCE),
        ("all_to_all_single", K.ALL_TO_ALL),
        ("recv_", K.RECV),
        ("recv_any_source", K.UNKNOWN),
        ("frobnicate", K.UNKNOWN),
        ("barrier", K.BARRIER),
        ("gather", K.GATHER),
        ("Generic", K.UNKNOWN),
        ("", K.UNKNOWN),
    ],
)
def test_names_as_traces_write_them(name: str, kind: K) -> None:
    assert collective_kind_from_name(name) is kind


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("all_reduce_perf", K.ALL_REDUCE),
        ("reduce_scatter_perf.log", K.REDUCE_SCATTER),
        ("allgather_16gpu.txt", K.ALL_GATHER),
        ("reduce_perf", K.REDUCE),
        ("alltoall_perf", K.ALL_TO_ALL),
        ("hypercube_perf", None),
    ],
)
def test_nccl_tests_program_names(text: str, kind: K | None) -> None:
    assert collective_in_text(text) is kind


def test_bus_factors_by_hand() -> None:
    """nccl-tests' busbw / algbw on 8 ranks."""
    assert collective(K.ALL_REDUCE).bus_factor(8) == 2 * 7 / 8
    assert collective(K.ALL_GATHER).bus_factor(8) == 7 / 8
    assert collective(K.REDUCE_SCATTER).bus_factor(8) == 7 / 8
    assert collective(K.ALL_TO_ALL).bus_factor(8) == 7 / 8
    assert collective(K.BROADCAST).bus_factor(8) == collective(K.REDUCE).bus_factor(8) == 1.0
    # nccl-tests gather.cu / scatter.cu: the root's own share does not cross a link.
    assert collective(K.GATHER).bus_factor(8) == collective(K.SCATTER).bus_factor(8) == 7 / 8
    assert collective(K.SEND_RECV).bus_factor(8) == 1.0
    # Timed as an all-reduce: its factor.
    assert collective(K.BARRIER).bus_factor(8) == collective(K.UNKNOWN).bus_factor(8) == 1.75
    assert collective(K.ALL_REDUCE).bus_factor(1) == 0.0


def test_properties_the_models_read() -> None:
    tuned = {c.kind for c in COLLECTIVES if c.tuned}
    assert tuned == {K.ALL_REDUCE, K.ALL_GATHER, K.REDUCE_SCATTER, K.BROADCAST, K.REDUCE}
    matched = {c.kind for c in COLLECTIVES if c.matched}
    assert matched == tuned | {K.BARRIER}
    per_rank = {c.kind for c in COLLECTIVES if c.per_rank_payload}
    assert per_rank == {K.ALL_GATHER, K.REDUCE_SCATTER}
    # record_param_comms sizes these by their output buffer (the gathered / received data).
    output_sized = {c.kind for c in COLLECTIVES if c.output_sized}
    assert output_sized == {K.ALL_GATHER, K.GATHER, K.RECV}
    assert collective(K.UNKNOWN).assumed and collective(K.BARRIER).timed_as is K.ALL_REDUCE
