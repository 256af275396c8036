"""Step times and their breakdown for a predicted job, beside the measured ones.

Both jobs go through the same analysis (:mod:`echo_view.analysis.breakdown`), so predicted and
measured step times mean the same thing: a step's window runs from its ``ProfilerStep`` start
to the later of its CPU end and the end of the last GPU work it launched (windows of
consecutive steps do not overlap). A rank's step time is the mean of its steps' windows; the
job's step time is, per step, the slowest rank's window, averaged over the steps every rank
has. Breakdown categories are per rank means over its steps (summed over its GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from echo_view.analysis.breakdown import StepBreakdown, breakdown
from echo_view.model import Job

NS_PER_S = 1e9
CATEGORIES = ("compute_ns", "comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns")


@dataclass(frozen=True, slots=True)
class RankSteps:
    """One rank: step windows by step number and mean category times."""

    rank: int
    windows: dict[int, int]
    categories: dict[str, int]

    @property
    def step_ns(self) -> int | None:
        return int(np.mean(list(self.windows.values()))) if self.windows else None


@dataclass(frozen=True, slots=True)
class JobSteps:
    """Every rank's steps and the job's step time (see the module docstring)."""

    ranks: tuple[RankSteps, ...]

    def common_steps(self) -> list[int]:
        present = [set(r.windows) for r in self.ranks if r.windows]
        return sorted(set.intersection(*present)) if present else []

    def step_ns(self, number: int) -> tuple[int, int]:
        """``(slowest window, its rank)`` of step ``number``."""
        best = max(
            ((r.windows[number], r.rank) for r in self.ranks if number in r.windows),
            key=lambda x: (x[0], -x[1]),
        )
        return best

    @property
    def job_step_ns(self) -> int | None:
        steps = self.common_steps()
        if not steps:
            return None
        return int(np.mean([self.step_ns(s)[0] for s in steps]))


def job_steps(job: Job) -> JobSteps:
    """Step windows and breakdowns of every rank of ``job``."""
    return JobSteps(tuple(_rank_steps(t.rank, breakdown(t)) for t in job.traces))


def _rank_steps(rank: int, bd: StepBreakdown) -> RankSteps:
    windows: dict[int, int] = {}
    for step, w in zip(bd.step.tolist(), bd.window_ns.tolist(), strict=True):
        windows.setdefault(int(step), int(w))
    n = max(len(windows), 1)
    cats = {c: int(np.sum(getattr(bd, c))) // n for c in CATEGORIES}
    return RankSteps(rank, windows, cats)


def _s(ns: int | None) -> float | None:
    return None if ns is None else ns / NS_PER_S


def _err(pred: int | None, meas: int | None) -> float | None:
    if pred is None or meas is None or meas == 0:
        return None
    return round(100.0 * (pred - meas) / meas, 3)


def compare(predicted: JobSteps, measured: JobSteps | None) -> dict[str, Any]:
    """The ``simulate --json`` step-time block: job step time, per step, per rank, with the
    measured values and signed errors (percent) when ``measured`` is given."""
    meas_by_rank = {r.rank: r for r in measured.ranks} if measured else {}
    ranks: list[dict[str, Any]] = []
    for r in predicted.ranks:
        m = meas_by_rank.get(r.rank)
        row: dict[str, Any] = {"rank": r.rank, "step_time_s": _s(r.step_ns)}
        row.update({c.removesuffix("_ns") + "_s": _s(v) for c, v in r.categories.items()})
        if m is not None:
            row["measured_step_time_s"] = _s(m.step_ns)
            row["error_pct"] = _err(r.step_ns, m.step_ns)
        ranks.append(row)
    steps: list[dict[str, Any]] = []
    # (once: a trace may hold 10^5 steps)
    measured_steps = set(measured.common_steps()) if measured else set()
    for number in predicted.common_steps():
        ns, rank = predicted.step_ns(number)
        item: dict[str, Any] = {"step": number, "step_time_s": _s(ns), "slowest_rank": rank}
        if measured and number in measured_steps:
            mns, mrank = measured.step_ns(number)
            item.update(
                measured_step_time_s=_s(mns),
                measured_slowest_rank=mrank,
                error_pct=_err(ns, mns),
            )
        steps.append(item)
    out: dict[str, Any] = {"step_time_s": _s(predicted.job_step_ns)}
    if measured is not None:
        out["measured_step_time_s"] = _s(measured.job_step_ns)
        out["error_pct"] = _err(predicted.job_step_ns, measured.job_step_ns)
    out["steps"] = steps
    out["ranks"] = ranks
    return out
