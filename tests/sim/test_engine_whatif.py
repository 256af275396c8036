"""What-if directions on random workloads with the NCCL model: twice the NIC bandwidth never
slows anything down, and removing communication gives the compute-only lower bound."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from echo_view.model.workload import OpTable, Workload
from echo_view.sim import SimResult, simulate
from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm import NcclModel
from tests.sim.test_properties import workloads

MODEL = NcclModel()


def _makespan(res: SimResult) -> int:
    return int(res.end_ns.max()) if len(res.end_ns) else 0


def _without_collectives(wl: Workload) -> Workload:
    """The same ops with every collective turned into a free local op: no transfer, no
    waiting for other ranks."""
    ops = wl.ops
    part = ops.coll >= 0
    table = OpTable(
        rank=ops.rank, lane=ops.lane, kind=ops.kind, op_class=ops.op_class, name=ops.name,
        dur_ns=np.where(part, 0, ops.dur_ns), gap_ns=ops.gap_ns, release_ns=ops.release_ns,
        step=ops.step, coll=np.full(len(ops), -1), source=ops.source,
    )  # fmt: skip
    return Workload(
        strings=wl.strings, lanes=wl.lanes, lane_rank=wl.lane_rank, ops=table, deps=wl.deps,
        collectives=wl.collectives, groups=wl.groups, world_size=wl.world_size,
    )  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(workloads(), st.sampled_from([1, 2]), st.sampled_from([3.125, 12.5, 50.0]))
def test_twice_the_nic_bandwidth_never_slows_a_step(
    wl: Workload, per_node: int, nic: float
) -> None:
    cluster = make_cluster("A100", gpus_per_node=per_node, nodes=4, nic_gbytes_per_s=nic)
    wide = make_cluster("A100", gpus_per_node=per_node, nodes=4, nic_gbytes_per_s=2 * nic)
    base = simulate(wl, cluster, comm=MODEL).result
    fast = simulate(wl, wide, comm=MODEL).result
    assert np.all(fast.coll_end_ns - fast.coll_start_ns <= base.coll_end_ns - base.coll_start_ns)
    assert np.all(fast.end_ns <= base.end_ns)
    assert _makespan(fast) <= _makespan(base)


@settings(max_examples=60, deadline=None)
@given(workloads())
def test_removing_communication_gives_the_compute_only_lower_bound(wl: Workload) -> None:
    cluster = make_cluster("H100", gpus_per_node=2, nodes=2)
    modelled = simulate(wl, cluster, comm=MODEL).result
    free = simulate(wl, comm_scale=0.0).result
    alone = simulate(_without_collectives(wl)).result
    # Free transfers still wait for the last rank; without collectives nobody waits.
    assert np.all(alone.end_ns <= free.end_ns) and np.all(free.end_ns <= modelled.end_ns)
    # The compute-only schedule is itself bounded below by each lane's own work.
    ops = wl.ops
    for lane in np.unique(ops.lane):
        on = ops.lane == lane
        busy = int(alone.dur_ns[on].sum() + alone.gap_ns[on][1:].sum())
        assert _makespan(alone) >= busy
