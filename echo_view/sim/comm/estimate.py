"""What a collective model answers: time, and how NCCL would run it."""

from __future__ import annotations

from dataclasses import dataclass

from echo_view.model import CollectiveKind


@dataclass(frozen=True, slots=True)
class CollectiveEstimate:
    """One collective's predicted time and shape.

    ``algbw`` is payload / time; ``busbw`` is ``algbw`` times nccl-tests' bus factor
    (:func:`bus_factor`), so it is comparable with nccl-tests' busbw column.
    """

    time_ns: int
    algorithm: str
    protocol: str
    channels: int
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    #: NCCL's own tuning-model estimate of the chosen algorithm, when NCCL's tuner chose it.
    nccl_time_ns: int | None = None
    #: Set when the collective was timed as another kind (``all_reduce`` for an unknown one).
    assumed: str | None = None


def bus_factor(kind: CollectiveKind, nranks: int) -> float:
    """nccl-tests' busbw / algbw: 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
    reduce-scatter and all-to-all, 1 otherwise."""
    n = max(nranks, 1)
    if kind in (CollectiveKind.ALL_REDUCE, CollectiveKind.BARRIER, CollectiveKind.UNKNOWN):
        return 2 * (n - 1) / n
    if kind in (
        CollectiveKind.ALL_GATHER,
        CollectiveKind.REDUCE_SCATTER,
        CollectiveKind.ALL_TO_ALL,
    ):
        return (n - 1) / n
    return 1.0
