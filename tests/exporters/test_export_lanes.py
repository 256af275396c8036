"""Overlap lanes: the vectorised nesting check against a brute-force definition, and the
first-fit assignment (every lane nests; lanes that nest are left alone)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from echo_view.model.trace_rules import nesting_order
from exporters.lanes import _badly_nested_lexsort, assign_lanes, badly_nested

Intervals = tuple[list[int], list[int], list[int]]


@st.composite
def intervals(draw: st.DrawFn) -> Intervals:
    n = draw(st.integers(0, 40))
    starts = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    durs = draw(st.lists(st.integers(0, 25), min_size=n, max_size=n))
    groups = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    return starts, durs, groups


def partly_overlapping_groups(starts: list[int], durs: list[int], groups: list[int]) -> set[int]:
    """Groups holding slices i, j with s_i < s_j < e_i < e_j (the only non-nesting case)."""
    out = set()
    for i, (si, di, gi) in enumerate(zip(starts, durs, groups, strict=True)):
        for j, (sj, dj, gj) in enumerate(zip(starts, durs, groups, strict=True)):
            if i != j and gi == gj and di > 0 and dj > 0 and si < sj < si + di < sj + dj:
                out.add(gi)
    return out


@settings(max_examples=300, deadline=None)
@given(intervals())
def test_check_matches_definition(case: Intervals) -> None:
    s, d, g = (np.array(x, dtype=np.int64) for x in case)
    flagged = set(g[badly_nested(s, d, g)].tolist())
    assert flagged == partly_overlapping_groups(*case)


@settings(max_examples=300, deadline=None)
@given(intervals())
def test_wide_keys_take_the_lexsort_path_with_the_same_answer(case: Intervals) -> None:
    s, d, g = (np.array(x, dtype=np.int64) for x in case)
    big = s + 2**61  # too wide to pack with the group into one int64
    cand = np.flatnonzero(d > 0)
    expected = badly_nested(s, d, g)
    assert (badly_nested(big, d, g) == expected).all()
    if len(cand) >= 2:
        rank = np.empty(len(cand), dtype=np.int64)
        rank[nesting_order(s[cand], d[cand], g[cand])] = np.arange(len(cand))
        slow = _badly_nested_lexsort(
            s[cand], d[cand], g[cand], rank, cand, np.zeros(len(s), dtype=bool)
        )
        assert (slow == expected).all()


@settings(max_examples=300, deadline=None)
@given(intervals())
def test_every_lane_nests_and_clean_groups_stay(case: Intervals) -> None:
    s, d, g = (np.array(x, dtype=np.int64) for x in case)
    lane = assign_lanes(s, d, g)
    sub = g * 1000 + lane
    assert not badly_nested(s, d, sub).any()
    assert not partly_overlapping_groups(s.tolist(), d.tolist(), sub.tolist())
    bad = partly_overlapping_groups(*case)
    for group in set(g.tolist()) - bad:
        assert (lane[g == group] == 0).all()
    assert (lane[d == 0] == 0).all()
    # lanes are numbered densely from 0
    for k in range(1, int(lane.max(initial=0)) + 1):
        assert (lane == k - 1).any()


def test_child_that_outlives_its_parent_moves_and_same_start_nesting_stays() -> None:
    s = np.array([0, 5, 20, 20, 40, 40, 45])
    d = np.array([10, 10, 10, 5, 10, 10, 1])
    g = np.zeros(7, dtype=np.int64)
    assert assign_lanes(s, d, g).tolist() == [0, 1, 0, 0, 0, 0, 0]


def test_pdl_kernels_alternate_lanes() -> None:
    # each kernel starts 1 ns before the previous one ends (programmatic dependent launch)
    s = np.arange(0, 100, 9)
    d = np.full(len(s), 10)
    lane = assign_lanes(s, d, np.zeros(len(s), dtype=np.int64))
    assert lane.tolist() == [0, 1] * (len(s) // 2) + [0] * (len(s) % 2)


def test_slices_that_all_cross_get_a_lane_each() -> None:
    # Slice i opens at i and closes at 2n + i: each starts inside all earlier ones and outlives
    # them, so none nests with another (n lanes; the scan was O(n^2) here).
    n = 5_000
    s = np.arange(n, dtype=np.int64)
    lane = assign_lanes(s, np.full(n, 2 * n), np.zeros(n, dtype=np.int64))
    assert lane.tolist() == list(range(n))
