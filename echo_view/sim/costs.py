"""Collective transfer times for a workload: measured, or from a communication model.

A comm model answers ``collective_time_ns(kind, nbytes, ranks, cluster)``; identical questions
are asked once. With no model the measured time of each collective is used (replay). A
collective whose payload is unknown cannot be modelled; it keeps its measured time and is
counted, so a report can say how much of the communication was modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from echo_view.errors import SimulationError
from echo_view.model.kinds import CollectiveKind
from echo_view.model.workload import Workload
from echo_view.units import float_ns

I64 = npt.NDArray[np.integer[Any]]


class CollectiveTimer(Protocol):
    """What the engine needs of a communication model."""

    def collective_time_ns(
        self, kind: CollectiveKind, nbytes: int, ranks: Sequence[int], cluster: Any
    ) -> int:
        """Transfer time of one collective in ns, from the last participant's arrival."""
        ...


@dataclass(frozen=True, slots=True)
class CollectiveCosts:
    """Transfer time per collective and how each was obtained."""

    dur_ns: I64
    modelled: int
    measured: int

    @property
    def total(self) -> int:
        return len(self.dur_ns)


def collective_costs(
    workload: Workload,
    comm: CollectiveTimer | None = None,
    cluster: Any = None,
    scale: float = 1.0,
) -> CollectiveCosts:
    """Transfer times of ``workload``'s collectives: from ``comm`` (asked with the group's
    ranks and ``cluster``) where the payload is known, else measured; all times ``* scale``."""
    cs = workload.collectives
    m = len(cs)
    out = np.zeros(m, dtype=np.int64)
    measured = cs.measured_ns
    used_model = np.zeros(m, dtype=bool)
    cache: dict[tuple[int, int, int], int] = {}
    kinds = cs.kind.tolist()
    nbytes = cs.bytes.tolist()
    groups = cs.group.tolist()
    for c in range(m):
        if comm is not None and nbytes[c] >= 0:
            key = (kinds[c], nbytes[c], groups[c])
            t = cache.get(key)
            if t is None:
                ranks = workload.groups[groups[c]].ranks
                t = int(
                    comm.collective_time_ns(CollectiveKind(kinds[c]), nbytes[c], ranks, cluster)
                )
                if t < 0:
                    raise SimulationError(
                        f"the comm model gave a negative time for {workload.collective_label(c)}"
                    )
                cache[key] = t
            out[c] = t
            used_model[c] = True
        elif measured[c] >= 0:
            out[c] = measured[c]
        else:
            raise SimulationError(
                f"collective {workload.collective_label(c)} has neither a measured time nor a "
                "known payload",
                where=f"collectives[{c}]",
                hint="use a communication model and a trace that records message sizes",
            )
    if scale != 1.0:
        out = float_ns(out * scale)
    n_model = int(used_model.sum())
    return CollectiveCosts(dur_ns=out, modelled=n_model, measured=m - n_model)
