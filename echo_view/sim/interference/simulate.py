"""Simulations with interference: a replay of a measured job, and a workload config.

:func:`simulate_replay` is :func:`echo_view.sim.simulate` for a workload reconstructed from a
measured job, with the measured slowdown removed from every overlapped kernel (its solo time,
:func:`~echo_view.sim.interference.replay_slowdowns`) and re-applied by the engine wherever the
simulated kernel overlaps communication. :func:`config_rate_hook` gives the rate hook of a
composed workload config.
"""

from __future__ import annotations

from typing import Any

from echo_view.model import Job
from echo_view.model.workload import Workload
from echo_view.sim import Simulation, engine, simulate
from echo_view.sim.compute import MeasuredCompute
from echo_view.sim.costs import CollectiveTimer, collective_costs
from echo_view.sim.interference.model import InterferenceModel, config_slowdowns, replay_slowdowns
from echo_view.sim.interference.rates import RateHook
from echo_view.units import float_ns


def simulate_replay(
    workload: Workload,
    job: Job,
    cluster: Any = None,
    *,
    compute: MeasuredCompute | None = None,
    comm: CollectiveTimer | None = None,
    comm_scale: float = 1.0,
    interference: InterferenceModel | None = None,
) -> Simulation:
    """Simulate a replayed ``workload`` of ``job`` (arguments as :func:`echo_view.sim.simulate`)
    with ``interference`` (``None``: measured durations as they are)."""
    if interference is None:
        return simulate(workload, cluster, compute=compute, comm=comm, comm_scale=comm_scale)
    model = compute if compute is not None else MeasuredCompute()
    slow = replay_slowdowns(workload, job, interference)
    factors = model.factors(workload)
    dur = float_ns(slow.solo_ns * factors)
    costs = collective_costs(workload, comm, cluster, comm_scale)
    hook = RateHook(workload, slow.slowdown, dur, slow.ops)
    result = engine.run(workload, dur, costs.dur_ns, model.gaps(workload), rates=hook)
    return Simulation(result, costs)


def config_rate_hook(
    composed: Any, model: InterferenceModel | None, gpu_name: str
) -> RateHook | None:
    """The rate hook of a composed workload config (``None`` when ``model`` is)."""
    if model is None:
        return None
    slow = config_slowdowns(composed, model, gpu_name)
    return RateHook(composed.workload, slow, composed.dur_ns)


__all__ = ["config_rate_hook", "simulate_replay"]
