"""The simulator: a deterministic discrete-event engine over a :class:`~echo_view.model.workload.
Workload`, with pluggable compute and communication cost models.

``simulate(workload, cluster, compute=..., comm=..., seed=...)`` returns a :class:`SimResult`;
:func:`~echo_view.sim.result.predicted_job` turns it into a predicted Job. Replay of measured
jobs lives in :mod:`echo_view.sim.replay`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from echo_view.model.workload import Workload
from echo_view.sim import engine
from echo_view.sim.compute import ComputeModel, MeasuredCompute
from echo_view.sim.costs import CollectiveCosts, CollectiveTimer, collective_costs
from echo_view.sim.result import SimResult, predicted_job, step_spans


@dataclass(frozen=True, slots=True)
class Simulation:
    """A result with the costs it was computed from."""

    result: SimResult
    collectives: CollectiveCosts


def simulate(
    workload: Workload,
    cluster: Any = None,
    *,
    compute: ComputeModel | None = None,
    comm: CollectiveTimer | None = None,
    comm_scale: float = 1.0,
    seed: int = 0,
) -> Simulation:
    """Simulate ``workload``. ``compute`` gives op durations (default: the workload's own costs);
    ``comm`` gives collective times on ``cluster`` (default: the measured ones), multiplied by
    ``comm_scale``. ``seed`` is accepted for models that draw random numbers; the engine itself
    draws none, so equal inputs give identical results."""
    del seed  # no randomness in the engine or the built-in models
    model = compute if compute is not None else MeasuredCompute()
    dur = model.durations(workload)
    gaps = model.gaps(workload) if isinstance(model, MeasuredCompute) else None
    costs = collective_costs(workload, comm, cluster, comm_scale)
    return Simulation(engine.run(workload, dur, costs.dur_ns, gaps), costs)


__all__ = [
    "CollectiveCosts",
    "CollectiveTimer",
    "ComputeModel",
    "MeasuredCompute",
    "SimResult",
    "Simulation",
    "predicted_job",
    "simulate",
    "step_spans",
]
