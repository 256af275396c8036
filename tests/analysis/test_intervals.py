"""Interval arithmetic: hand-computed cases and a brute-force property check."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from echo_view.analysis.intervals import clip, measure, pattern_measure, union


def test_union_merges_overlapping_and_touching() -> None:
    s, e = union([10, 0, 5, 30, 20, 40], [15, 6, 8, 35, 30, 40])
    # [0,6)+[5,8) -> [0,8); [10,15); [20,30)+[30,35) touch -> [20,35); [40,40) is empty.
    assert s.tolist() == [0, 10, 20]
    assert e.tolist() == [8, 15, 35]


def test_union_nested_and_empty() -> None:
    s, e = union([0, 2, 3], [10, 4, 5])
    assert (s.tolist(), e.tolist()) == ([0], [10])
    s, e = union([], [])
    assert len(s) == len(e) == 0


def test_measure_and_clip() -> None:
    assert measure([0, 5, 20], [10, 12, 21]) == 13
    s, e = clip([0, 5, 20], [10, 12, 21], 8, 20)
    assert (s.tolist(), e.tolist()) == ([8, 8], [10, 12])


def test_pattern_measure_two_labels_two_windows() -> None:
    # label 0: [0,10); label 1: [5,15) and [6,8) (overlap within the label counts once).
    out = pattern_measure([0, 5, 6], [10, 15, 8], np.array([0, 1, 1]), 2, [0, 12], [12, 20])
    # window [0,12): only 0 on [0,5) = 5; both on [5,10) = 5; only 1 on [10,12) = 2.
    assert out[0].tolist() == [0, 5, 2, 5]
    # window [12,20): only 1 on [12,15) = 3; none on [15,20) = 5.
    assert out[1].tolist() == [5, 0, 3, 0]


def test_pattern_measure_rejects_overlapping_windows() -> None:
    with pytest.raises(ValueError, match="disjoint"):
        pattern_measure([0], [1], np.array([0]), 1, [0, 5], [10, 20])


def _brute(
    starts: list[int], ends: list[int], labels: list[int], ws: list[int], we: list[int]
) -> np.ndarray:
    out = np.zeros((len(ws), 4), dtype=np.int64)
    for w, (lo, hi) in enumerate(zip(ws, we, strict=True)):
        for t in range(lo, hi):
            p = 0
            for s, e, lab in zip(starts, ends, labels, strict=True):
                if s <= t < e:
                    p |= 1 << lab
            out[w, p] += 1
    return out


intervals = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 25), st.integers(0, 1)), max_size=12
)


@settings(max_examples=150, deadline=None)
@given(intervals, st.lists(st.integers(0, 80), min_size=0, max_size=6, unique=True))
def test_pattern_measure_matches_brute_force(
    ivs: list[tuple[int, int, int]], cuts: list[int]
) -> None:
    starts = [s for s, _, _ in ivs]
    ends = [s + d for s, d, _ in ivs]
    labels = [lab for _, _, lab in ivs]
    edges = sorted(cuts)
    ws, we = edges[0::2], edges[1::2]
    ws = ws[: len(we)]
    got = pattern_measure(starts, ends, np.array(labels, dtype=np.int64), 2, ws, we)
    assert got.tolist() == _brute(starts, ends, labels, ws, we).tolist()
    if ws:
        assert (got.sum(axis=1) == np.array(we) - np.array(ws)).all()
    s, e = union(starts, ends)
    covered = {t for a, b in zip(starts, ends, strict=True) for t in range(a, b)}
    assert int((e - s).sum()) == len(covered)
