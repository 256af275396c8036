"""What bounds a replayed step: the GPUs or the CPU that launches their work.

Measured, not guessed: the replay is simulated again with every GPU op (kernels, copies and
collectives) twice as fast, and again with every CPU op (and the gaps between them) twice as
fast. A step the GPU bounds gets up to 50% shorter in the first run; a step bound by CPU dispatch
— the GPU waits for launches, the CPU launch path is the critical path — barely moves in the first
and shrinks in the second. GPU-side what-ifs (kernel scales, faster links, another GPU) cannot
shorten such a step, whatever the model says about them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from echo_view.model import Job
from echo_view.model.workload import Workload
from echo_view.sim.compute import MeasuredCompute
from echo_view.sim.costs import CollectiveTimer
from echo_view.sim.interference import InterferenceModel
from echo_view.sim.interference.simulate import simulate_replay
from echo_view.sim.report import job_steps
from echo_view.sim.result import predicted_job

#: How much faster the side under test is made.
SPEEDUP = 2.0
#: A side bounds the step when its 2x shortens the step by at least ``DECISIVE`` (of the 50% a
#: step wholly bound by it would gain) and the other side's 2x by less than ``NEGLIGIBLE``.
DECISIVE = 0.2
NEGLIGIBLE = 0.05

Bound = Literal["cpu-dispatch", "gpu", "mixed"]


@dataclass(frozen=True, slots=True)
class StepBound:
    """Step-time gains (fractions of the step) from a 2x faster GPU and a 2x faster CPU."""

    gpu_gain: float
    cpu_gain: float

    @property
    def bound(self) -> Bound:
        if self.gpu_gain < NEGLIGIBLE and self.cpu_gain >= DECISIVE:
            return "cpu-dispatch"
        if self.cpu_gain < NEGLIGIBLE and self.gpu_gain >= DECISIVE:
            return "gpu"
        return "mixed"

    def to_json(self) -> dict[str, Any]:
        return {"bound": self.bound, "gpu_2x_gain": self.gpu_gain, "cpu_2x_gain": self.cpu_gain}


def step_bound(
    workload: Workload,
    job: Job,
    step_ns: int,
    *,
    cluster: Any = None,
    scales: Mapping[str, float] | None = None,
    comm: CollectiveTimer | None = None,
    comm_scale: float = 1.0,
    interference: InterferenceModel | None = None,
) -> StepBound:
    """Gains of the replay (simulated with these settings, job step ``step_ns``) from a 2x
    faster GPU and from a 2x faster CPU."""
    base = dict(scales or {})

    def gain(side: str, comm_factor: float) -> float:
        faster = {**base, side: base.get(side, 1.0) / SPEEDUP}
        sim = simulate_replay(
            workload, job, cluster, compute=MeasuredCompute(faster), comm=comm,
            comm_scale=comm_scale * comm_factor, interference=interference,
        )  # fmt: skip
        origin = int(workload.meta["origin_ns"])
        ns = job_steps(predicted_job(workload, sim.result, job, origin)).job_step_ns
        return 0.0 if ns is None or step_ns <= 0 else 1.0 - ns / step_ns

    return StepBound(gpu_gain=gain("all", 1.0 / SPEEDUP), cpu_gain=gain("cpu", 1.0))
