"""Property tests of the engine on random workloads: lanes never overlap, no op starts before
its dependencies allow, every op starts as early as they allow, a collective's participants
end together, equal inputs give identical results, and faster parts never slow anything."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from echo_view.model import CollectiveKind, LaneKind
from echo_view.model.workload import DepMode, Workload
from echo_view.model.workload_builder import WorkloadBuilder
from echo_view.sim import MeasuredCompute, SimResult, engine, simulate

KINDS = (CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    """Ranks with a CPU thread and one to three GPU streams; random ops, random dependencies
    inside a rank (from an earlier op to a later one), and collectives every rank issues in
    the same order on its last stream — so the workload can always complete."""
    n_ranks = draw(st.integers(1, 4))
    n_coll = draw(st.integers(0, 4))
    b = WorkloadBuilder(world_size=n_ranks)
    group = b.group(list(range(n_ranks)))
    colls = [
        b.collective(
            draw(st.sampled_from(KINDS)),
            group,
            nbytes=draw(st.integers(0, 1 << 24)),
            measured_ns=draw(st.integers(0, 500)),
        )
        for _ in range(n_coll)
    ]
    for rank in range(n_ranks):
        lanes = [b.lane(rank, LaneKind.CPU_THREAD, "main")]
        lanes += [
            b.lane(rank, LaneKind.GPU_STREAM, f"s{k}") for k in range(draw(st.integers(1, 3)))
        ]
        ids: list[int] = []
        plan = draw(st.lists(st.integers(0, len(lanes) - 1), min_size=1, max_size=25))
        slots = sorted(draw(st.lists(st.integers(0, len(plan)), min_size=n_coll, max_size=n_coll)))
        c_next = 0
        for pos, lane_pick in enumerate([*plan, None]):
            while c_next < n_coll and slots[c_next] == pos:
                ids.append(b.participant(lanes[-1], colls[c_next]))
                c_next += 1
            if lane_pick is None:
                break
            first = not ids
            ids.append(
                b.op(
                    lanes[lane_pick],
                    f"op{pos}",
                    draw(st.integers(0, 100)),
                    gap_ns=draw(st.integers(0, 20)),
                    release_ns=draw(st.integers(0, 50)) if first or draw(st.booleans()) else -1,
                )
            )
        for _ in range(draw(st.integers(0, 2 * len(ids))) if len(ids) > 1 else 0):
            a, z = sorted(draw(st.lists(st.sampled_from(ids), min_size=2, max_size=2, unique=True)))
            b.dep(
                a,
                z,
                mode=draw(st.sampled_from(list(DepMode))),
                lag_ns=draw(st.integers(0, 30)),
            )
    wl = b.build()
    return _without_end_waits_on_collectives(wl)


def _without_end_waits_on_collectives(wl: Workload) -> Workload:
    """Collective ops do not take end-to-end waits (the engine refuses them): turn those
    into end-to-start waits."""
    from echo_view.model.workload import DepTable

    deps = wl.deps
    dst = deps.dst()
    mode = deps.mode.astype(np.int64).copy()
    bad = (mode == int(DepMode.END_TO_END)) & (wl.ops.coll[dst] >= 0)
    mode[bad] = int(DepMode.END_TO_START)
    table = DepTable(ptr=deps.ptr, src=deps.src, mode=mode, lag_ns=deps.lag_ns, kind=deps.kind)
    return Workload(
        strings=wl.strings,
        lanes=wl.lanes,
        lane_rank=wl.lane_rank,
        ops=wl.ops,
        deps=table,
        collectives=wl.collectives,
        groups=wl.groups,
        steps=wl.steps,
        world_size=wl.world_size,
    )


def _check(wl: Workload, res: SimResult) -> None:
    start, end = res.start_ns, res.end_ns
    ops = wl.ops
    n = len(wl)
    assert np.all(start >= 0) and np.all(end >= start)
    # Earliest start each op's constraints allow, and the earliest end.
    bound = np.maximum(ops.release_ns, 0).astype(np.int64)
    end_bound = np.zeros(n, dtype=np.int64)
    for lane in np.unique(ops.lane):
        ids = np.flatnonzero(ops.lane == lane)  # lane order is id order
        # No two ops overlap on one lane, and each waits for its gap.
        assert np.all(start[ids[1:]] >= end[ids[:-1]] + res.gap_ns[ids[1:]])
        np.maximum.at(bound, ids[1:], end[ids[:-1]] + res.gap_ns[ids[1:]])
    dst = wl.deps.dst()
    for s, d, m, lag in zip(wl.deps.src, dst, wl.deps.mode, wl.deps.lag_ns, strict=True):
        if m == DepMode.END_TO_START:
            assert start[d] >= end[s] + lag
            bound[d] = max(bound[d], end[s] + lag)
        elif m == DepMode.START_TO_START:
            assert start[d] >= start[s] + lag
            bound[d] = max(bound[d], start[s] + lag)
        else:
            assert end[d] >= end[s] + lag
            end_bound[d] = max(end_bound[d], end[s] + lag)
    # As early as allowed: every op starts exactly when its last constraint releases it.
    assert np.array_equal(start, bound)
    solo = ops.coll < 0
    expect_end = np.maximum(start + res.dur_ns, end_bound)
    assert np.array_equal(end[solo], expect_end[solo])
    # A collective starts when its last participant is ready; all participants end together.
    for c in range(len(wl.collectives)):
        members = np.flatnonzero(ops.coll == c)
        if not len(members):
            continue
        assert res.coll_start_ns[c] == start[members].max()
        assert np.all(end[members] == res.coll_start_ns[c] + res.coll_dur_ns[c])
        assert res.coll_end_ns[c] == end[members[0]]


@settings(max_examples=150, deadline=None)
@given(workloads())
def test_schedule_respects_every_constraint_and_is_reproducible(wl: Workload) -> None:
    res = simulate(wl).result
    _check(wl, res)
    assert res.identical(simulate(wl).result)


@settings(max_examples=75, deadline=None)
@given(workloads())
def test_coarsening_changes_nothing(wl: Workload) -> None:
    dur = wl.ops.dur_ns
    cdur = wl.collectives.measured_ns
    plain = engine.run(wl, dur, cdur, coarsen=False)
    assert plain.identical(engine.run(wl, dur, cdur))


@settings(max_examples=75, deadline=None)
@given(workloads(), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_faster_parts_never_make_anything_later(wl: Workload, compute: float, comm: float) -> None:
    base = simulate(wl).result
    fast = simulate(wl, compute=MeasuredCompute({"all": compute, "cpu": compute}), comm_scale=comm)
    _check(wl, fast.result)
    assert np.all(fast.result.end_ns <= base.end_ns)
    assert np.all(fast.result.start_ns <= base.start_ns)
