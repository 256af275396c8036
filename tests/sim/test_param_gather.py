"""Megatron-Core's ``align_param_gather`` in the interleaved schedule: when each chunk's
parameter gather is dispatched, against the order worked out by hand from
``forward_step_helper_preprocess``."""

from __future__ import annotations

import pytest

from echo_view.model.graph import OpClass, Role, TracedGraph
from echo_view.model.strings import StringTable
from echo_view.sim.cluster import cluster_from_config
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.config_sim import ConfigSimulation
from echo_view.sim.kernel_cost import ComputeParams
from tests.sim.test_compose import _cfg, _table, _with_grads, simulate_gpu

PP, V, M = 2, 4, 2


def _sim(align: bool) -> ConfigSimulation:
    """Two stages of four chunks, one forward GEMM each (``fwd{chunk}``) and parameters of
    one bucket, with the distributed optimizer's overlapped gather."""
    strings = StringTable()
    fwds = tuple(_table(strings, [(f"fwd{c}", OpClass.GEMM, 1e12, 0)]) for c in range(V))
    bwd = _with_grads(_table(strings, [("bwd", OpClass.GEMM, 2e12, 0)]), [4 * 10**6])
    opt = _table(strings, [("adam", OpClass.OPTIMIZER, 0.0, 10**6)])
    roles = tuple(Role((s,), fwds, (bwd,) * V, opt, params=V * 10**6) for s in range(PP))
    parallel = {
        "virtual_stages": V,
        "distributed_optimizer": True,
        "overlap_grad_reduce": True,
        "overlap_param_gather": True,
        "align_param_gather": align,
    }
    cfg = _cfg(pp=PP, dp=2, micro_batches=M, model={"layers": PP * V}, parallel=parallel)
    cluster = cluster_from_config(cfg.cluster)
    graph = TracedGraph(strings, roles)
    return simulate_gpu(graph, cfg, cluster, default_comm_model(), ComputeParams(), ranks="all")


def _forwards_before_gathers(sim: ConfigSimulation, rank: int) -> dict[int, int]:
    """Local chunk -> how many forward passes the rank issued before that chunk's gather."""
    wl = sim.composed.workload
    forwards, out = 0, {}
    for name_id, r in zip(wl.ops.name, wl.ops.rank, strict=True):
        if int(r) != rank:
            continue
        name = wl.strings[int(name_id)]
        if name.startswith("fwd"):
            forwards += 1
        elif name.startswith("ncclDevKernel_AllGather (params forward chunk"):
            g = int(name.split("chunk ")[1].split()[0])
            out[g // PP] = forwards
    return out


@pytest.mark.parametrize("stage", range(PP))
def test_aligned_gathers_are_dispatched_by_the_schedule(stage: int) -> None:
    """Forward order of the virtual micro-batches (groups of N = pp = 2 per chunk): chunks
    0 0 1 1 2 2 3 3. Chunks 0 and 1 are gathered before the first forward; chunk k + 1 before
    the forward ``stage`` ahead of chunk k's first (virtual micro-batch 2k): on stage 0 chunk 2
    after 2 forwards and chunk 3 after 4, on stage 1 after 1 and 3. Without alignment each
    chunk's gather is dispatched at its own first forward: after 0, 2, 4 and 6."""
    rank = stage * 2  # (stage, dp 0): pipeline stages are outermost
    aligned = _forwards_before_gathers(_sim(True), rank)
    assert aligned == {0: 0, 1: 0, 2: 2 - stage, 3: 4 - stage}
    assert _forwards_before_gathers(_sim(False), rank) == {0: 0, 1: 2, 2: 4, 3: 6}


def test_aligned_gathers_end_before_their_chunk_computes() -> None:
    sim = _sim(True)
    wl, res = sim.composed.workload, sim.result
    ends: dict[tuple[int, int], int] = {}
    first_fwd: dict[tuple[int, int], int] = {}
    for i, (name_id, r) in enumerate(zip(wl.ops.name, wl.ops.rank, strict=True)):
        name = wl.strings[int(name_id)]
        if name.startswith("ncclDevKernel_AllGather (params forward chunk"):
            g = int(name.split("chunk ")[1].split()[0])
            ends[(int(r), g // PP)] = int(res.end_ns[i])
        elif name.startswith("fwd"):
            first_fwd.setdefault((int(r), int(name[3:])), int(res.start_ns[i]))
    assert set(ends) == set(first_fwd)
    assert all(first_fwd[key] >= ends[key] for key in ends)
