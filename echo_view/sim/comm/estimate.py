"""What a collective model answers: time, and how NCCL would run it."""

from __future__ import annotations

from dataclasses import dataclass

from echo_view.model import CollectiveKind
from echo_view.model.collectives import collective


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
    """nccl-tests' busbw / algbw of ``kind`` on ``nranks`` (the collective catalogue's)."""
    return collective(kind).bus_factor(nranks)
