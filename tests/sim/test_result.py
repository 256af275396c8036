"""``echo_view.sim.result``: measured times mapped to predicted ones through each lane's
replayed ops, for every lane in one pass."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from echo_view.sim.result import _Anchors

I64 = npt.NDArray[np.int64]


def _one_lane(t: I64, ms: I64, me: I64, ps: I64, pe: I64) -> I64:
    """The per-lane rule written out time by time: before the first op, shifted with it;
    inside an op, linear; after one, gap-preserving up to the next op's predicted start."""
    out = []
    for x in t.tolist():
        k = int(np.searchsorted(ms, x, side="right")) - 1
        if k < 0:
            out.append(int(ps[0] - (ms[0] - x)))
        elif x <= me[k]:
            ratio = (pe[k] - ps[k]) / max(me[k] - ms[k], 1)
            out.append(min(int(ps[k] + np.round((x - ms[k]) * ratio)), int(pe[k])))
        else:
            cap = int(ps[k + 1]) if k + 1 < len(ms) else np.iinfo(np.int64).max
            out.append(min(int(pe[k] + (x - me[k])), cap))
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("seed", range(40))
def test_all_lanes_at_once_equal_each_lane_alone(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    lane = rng.integers(0, 5, n).astype(np.int64)
    ms = rng.integers(0, 50, n).astype(np.int64)
    me = ms + rng.integers(0, 10, n)
    ps = ms + rng.integers(-5, 20, n)
    pe = ps + rng.integers(0, 12, n)
    anchors = _Anchors.of(lane, ms, me, ps, pe)
    q_lane = rng.integers(0, 7, 60).astype(np.int64)  # lanes 5 and 6 have no anchor
    q_t = rng.integers(-10, 70, 60).astype(np.int64)
    got, has = anchors.map(q_lane, q_t)
    assert (has == (q_lane < 5) & np.isin(q_lane, lane)).all()
    assert (got[~has] == q_t[~has]).all()
    for lid in np.unique(q_lane[has]).tolist():
        mine = lane == lid
        order = np.argsort(ms[mine], kind="stable")
        ref = _one_lane(q_t[q_lane == lid], *(a[mine][order] for a in (ms, me, ps, pe)))
        assert (got[q_lane == lid] == ref).all()
