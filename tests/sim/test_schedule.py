"""Pipeline schedules: Megatron's 1F1B and interleaved orders, checked by construction rules
and by an ideal-time replay that must reproduce the textbook bubble."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from echo_view.sim.schedule import (
    Pass,
    blocking_p2p_calls,
    bubble_fraction,
    schedule,
    schedule_arrays,
)


def test_1f1b_small_case_by_hand() -> None:
    f, b = True, False
    assert schedule(0, 2, 3) == [
        Pass(f, 0, 0),
        Pass(f, 0, 1),
        Pass(b, 0, 0),
        Pass(f, 0, 2),
        Pass(b, 0, 1),
        Pass(b, 0, 2),
    ]
    assert schedule(1, 2, 3) == [
        Pass(f, 0, 0),
        Pass(b, 0, 0),
        Pass(f, 0, 1),
        Pass(b, 0, 1),
        Pass(f, 0, 2),
        Pass(b, 0, 2),
    ]


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 1), (4, 8, 2), (3, 6, 3), (8, 8, 2), (2, 1, 1)])
def test_every_pass_runs_once_and_backward_follows_forward(p: int, m: int, v: int) -> None:
    for s in range(p):
        order = schedule(s, p, m, v)
        assert sorted((x.forward, x.chunk, x.microbatch) for x in order) == sorted(
            (fw, c, j) for fw in (True, False) for c in range(v) for j in range(m)
        )
        seen = set()
        for x in order:
            if x.forward:
                seen.add((x.chunk, x.microbatch))
            else:
                assert (x.chunk, x.microbatch) in seen


def _replay(p: int, m: int, v: int, tf: int, tb: int, n: int | None = None) -> int:
    """Ideal makespan: pass times tf/tb, no communication cost, cross-stage dependencies."""
    orders = [schedule(s, p, m, v, n) for s in range(p)]
    done: dict[tuple[bool, int, int], int] = {}  # (forward, global chunk, micro) -> end time
    pos, clock = [0] * p, [0] * p
    total = sum(len(o) for o in orders)
    while len(done) < total:
        progressed = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                x = orders[s][pos[s]]
                g = x.chunk * p + s
                need = (True, g - 1, x.microbatch) if x.forward else (False, g + 1, x.microbatch)
                if (x.forward and g == 0) or (not x.forward and g == p * v - 1):
                    ready = 0 if x.forward else done[(True, g, x.microbatch)]
                elif need in done:
                    ready = done[need]
                else:
                    break
                start = max(clock[s], ready)
                clock[s] = start + (tf if x.forward else tb)
                done[(x.forward, g, x.microbatch)] = clock[s]
                pos[s] += 1
                progressed = True
        assert progressed, "schedule deadlocked"
    return max(clock)


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 1), (4, 16, 1), (4, 8, 2), (4, 16, 4)])
def test_ideal_makespan_matches_the_bubble_formula(p: int, m: int, v: int) -> None:
    tf, tb = 10, 20  # per chunk; a full micro-batch through the stage is v * (tf + tb)
    ideal = m * v * (tf + tb)
    makespan = _replay(p, m, v, tf, tb)
    assert (makespan - ideal) / ideal == pytest.approx(bubble_fraction(p, m, v), rel=1e-9)


def _passes(text: str) -> list[Pass]:
    """``"F0.1 B1.0"``: forward of chunk 0, micro-batch 1; backward of chunk 1, micro-batch 0."""
    return [Pass(x[0] == "F", int(x[1]), int(x[3])) for x in text.split()]


def test_grouped_interleaving_by_hand() -> None:
    # Megatron-Core's own example (ModelParallelConfig.microbatch_group_size_per_vp_stage):
    # pp 2, v 2, N 3, m 5 runs the forwards of micro-batches 0 1 2 0 1 2 3 4 3 4 through
    # chunks 0 0 0 1 1 1 0 0 1 1. Warm-up: (p - s - 1) * 2 + (v - 1) * N = 5 on stage 0,
    # 3 on stage 1; backwards take the same order with the chunks reversed.
    assert schedule(0, 2, 5, 2, 3) == _passes(
        "F0.0 F0.1 F0.2 F1.0 F1.1 F1.2 B1.0 F0.3 B1.1 F0.4 B1.2 F1.3 B0.0 F1.4 B0.1 "
        "B0.2 B1.3 B1.4 B0.3 B0.4"
    )
    assert schedule(1, 2, 5, 2, 3) == _passes(
        "F0.0 F0.1 F0.2 F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F0.3 B0.0 F0.4 B0.1 F1.3 B0.2 "
        "F1.4 B1.3 B1.4 B0.3 B0.4"
    )


def test_m_equal_to_p_warms_up_by_stage() -> None:
    # Since Megatron-Core's tunable schedule, m == p no longer runs every forward first: the
    # last stage of pp 2, v 2, m 2 warms up (v - 1) * p = 2 passes, the first all 4.
    assert schedule(1, 2, 2, 2) == _passes("F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 B0.0 B0.1")
    assert schedule(0, 2, 2, 2) == _passes("F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1")


@pytest.mark.parametrize(("p", "m", "v", "n"), [(2, 5, 2, 3), (4, 10, 2, 5), (4, 16, 4, 8)])
def test_grouping_keeps_the_ideal_bubble(p: int, m: int, v: int, n: int) -> None:
    # Dubey et al. 2024 (Sec. 3.3.2): with N tunable the bubble stays (PP - 1) / (V * M).
    tf, tb = 10, 20
    ideal = m * v * (tf + tb)
    assert (_replay(p, m, v, tf, tb, n) - ideal) / ideal == pytest.approx(
        bubble_fraction(p, m, v), rel=1e-9
    )


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="outside"):
        schedule(4, 4, 8)
    with pytest.raises(ValueError, match="multiple"):
        schedule(0, 4, 6, 2)
    with pytest.raises(ValueError, match="between pp = 4"):
        schedule(0, 4, 8, 2, 3)
    with pytest.raises(ValueError, match="10 mod 8 = 2"):
        schedule(0, 4, 10, 2, 8)


def test_blocking_p2p_calls_follow_megatrons_interleaved_schedule() -> None:
    """pp 2, v 2, m 4 (N = 2). Stage 0 warms up (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards, a
    call after each; then four forward / backward pairs, one call after each pair's backward
    (the forward's output goes out with it); then four backwards, a call after each. Stage 1
    warms up 2."""
    t, f = True, False
    assert blocking_p2p_calls(0, 2, 4, 2) == [t, t, t, t, f, t, f, t, f, t, f, t, t, t, t, t]
    assert blocking_p2p_calls(1, 2, 4, 2) == [t, t, *[f, t] * 6, t, t]
    order = schedule(0, 2, 4, 2)
    calls = blocking_p2p_calls(0, 2, 4, 2)
    # No call between a steady-state forward and the backward it is paired with.
    assert all(order[i + 1].forward is False for i, c in enumerate(calls) if not c)


@given(
    p=st.integers(1, 9),
    v=st.integers(1, 5),
    m=st.integers(1, 40),
    n=st.one_of(st.none(), st.integers(1, 45)),
    data=st.data(),
)
@settings(max_examples=400, deadline=None)
def test_schedule_arrays_are_the_schedule(
    p: int, v: int, m: int, n: int | None, data: st.DataObject
) -> None:
    stage = data.draw(st.integers(0, p - 1))
    try:
        passes = schedule(stage, p, m, v, n)
    except ValueError as exc:
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            schedule_arrays(stage, p, m, v, n)
        return
    forward, chunk, microbatch = schedule_arrays(stage, p, m, v, n)
    got = list(zip(forward.tolist(), chunk.tolist(), microbatch.tolist(), strict=True))
    assert got == [(ps.forward, ps.chunk, ps.microbatch) for ps in passes]
    # Every stage ends on a backward of chunk 0, which plan's pipeline floor relies on.
    assert not passes[-1].forward and passes[-1].chunk == 0


def test_schedule_arrays_of_a_step_with_millions_of_passes() -> None:
    # 250 chunks x 16,384 micro-batches: 8.2 M passes, as a 2,000-layer plan candidate has.
    forward, chunk, microbatch = schedule_arrays(0, 8, 16_384, 250)
    assert len(forward) == 2 * 250 * 16_384 and int(forward.sum()) == 250 * 16_384
    warmup = 7 * 2 + 249 * 8  # (p - s - 1) * 2 + (v - 1) * N
    assert forward[: warmup + 1].all() and not forward[warmup + 1]
    assert (chunk[-1], microbatch[-1]) == (0, 16_383)  # the last backward: chunk 0, last micro
