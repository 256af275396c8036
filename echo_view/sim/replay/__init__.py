"""Replay: a measured job as a workload the simulator runs (``simulate`` on traces).

:mod:`.build` turns each rank's timeline into ops and lanes (:func:`workload_from_job`),
:mod:`.deps` infers what each op waits for, :mod:`.lags` measures the lag of each dependency so
that measured durations reproduce the measured timeline, and :mod:`.collectives` matches
collectives across ranks.
"""

from echo_view.sim.replay.build import ReplayInfo, workload_from_job

__all__ = ["ReplayInfo", "workload_from_job"]
