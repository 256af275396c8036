"""Interference rate arithmetic, checked by hand."""

from __future__ import annotations

import numpy as np

from echo_view.sim.interference.measure import OverlapSamples
from echo_view.sim.interference.measured_rates import finish_times, predict_durations
from tests.sim.interference.interference_data import FACTORS, synthetic


def test_finish_times_by_hand() -> None:
    us, ue = np.array([20_000, 200_000]), np.array([60_000, 210_000])
    ends = finish_times(
        [0, 0, 30_000, 70_000, 0, 190_000],
        [100_000, 10_000, 100_000, 100_000, 25_000, 30_000],
        [2 / 3, 2 / 3, 2 / 3, 2 / 3, 0.5, 0.5],
        us,
        ue,
    )
    # 0: 20 alone + 40 at 2/3 (26.667) + 53.333 alone -> 113.333 µs.
    # 1: done before the comm starts. 2: starts inside: 30 slowed = 20 of work, 80 left -> 140.
    # 3: starts after the first comm: 100 alone until 170. 4: 20 alone + 10 at 1/2 = 5 -> 30.
    # 5: 10 alone to 200, 10 slowed (= 5 of work), 15 alone -> 225.
    assert ends.tolist() == [113_333, 10_000, 140_000, 170_000, 30_000, 225_000]


def test_predicted_durations_read_any_device_number() -> None:
    # Device numbers are whatever a trace gives; they were once packed beside the trace index
    # in 20 bits, and 2^21 then named no communication (a KeyError).
    s = synthetic(FACTORS)
    slow = np.full(len(s), 1.3)
    base = predict_durations(s, slow)
    for shift in (1 << 21, (1 << 40) + 3):
        moved = OverlapSamples(
            {**s.cols, "device": s.cols["device"] + shift},
            s.sources,
            {(t, d + shift): iv for (t, d), iv in s.comm.items()},
        )
        assert predict_durations(moved, slow).tolist() == base.tolist()
