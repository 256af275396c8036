"""Pipeline schedules: Megatron's 1F1B and interleaved orders, checked by construction rules
and by an ideal-time replay that must reproduce the textbook bubble."""

from __future__ import annotations

import pytest

from echo_view.sim.schedule import Pass, bubble_fraction, schedule


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


def _replay(p: int, m: int, v: int, tf: int, tb: int) -> int:
    """Ideal makespan: pass times tf/tb, no communication cost, cross-stage dependencies."""
    orders = [schedule(s, p, m, v) for s in range(p)]
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


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="outside"):
        schedule(4, 4, 8)
    with pytest.raises(ValueError, match="multiple"):
        schedule(0, 4, 6, 2)
