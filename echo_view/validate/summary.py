"""What the cross-rank rules need from each rank: a :class:`RankSummary` of small columns.

It is built either from raw Kineto events while a file streams by (``kineto.py``) or from an
imported or simulated :class:`~echo_view.model.Job` (:func:`summaries_from_job`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from echo_view.model import CollectiveKind, Job, Trace

#: Group name of collectives whose process group is not recorded.
UNKNOWN_GROUP = ""

_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def rank_from_name(name: str) -> int | None:
    """The rank a file name carries (``rank-3``, ``worker3_step_12``, ``rank_3``)."""
    m = _RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else None


@dataclass
class RankSummary:
    """What the cross-rank rules need from one rank, as small columns.

    Times are on the job clock in ns. Collectives are in start order; ``group`` names the
    process group (``""`` unknown), ``kind`` is a :class:`CollectiveKind` label, sizes are
    element counts or bytes (-1 unknown; one job uses one unit), ``seq`` is -1 when unknown.
    ``index`` locates each collective (``traceEvents`` index or model row).
    """

    source: str
    rank: int | None = None
    world_size: int | None = None
    rank_recorded: bool = True
    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    group: list[str] = field(default_factory=list)
    kind: list[str] = field(default_factory=list)
    dtype: list[str] = field(default_factory=list)
    in_size: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    out_size: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    seq: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    start_ns: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    end_ns: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    index: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    step_number: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    step_start_ns: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    step_end_ns: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.kind)


def summaries_from_job(job: Job) -> list[RankSummary]:
    """One summary per trace of an imported (or simulated) job, on the job's clock."""
    return [
        on_job_clock(summary_from_trace(t), off, job.world_size)
        for t, off in zip(job.traces, job.alignment.offsets_ns, strict=True)
    ]


def on_job_clock(s: RankSummary, offset_ns: int, world_size: int | None) -> RankSummary:
    """``s`` (of one trace, on its own clock) with its times on the job clock (``+ offset_ns``,
    the trace's clock offset) and the job's world size, when the job knows it."""
    return replace(
        s,
        world_size=world_size if world_size is not None else s.world_size,
        start_ns=s.start_ns + offset_ns,
        end_ns=s.end_ns + offset_ns,
        step_start_ns=s.step_start_ns + offset_ns,
        step_end_ns=s.step_end_ns + offset_ns,
    )


def summary_from_trace(trace: Trace) -> RankSummary:
    """A :class:`RankSummary` of one model trace (sizes in bytes, times on the trace's own
    clock: :func:`on_job_clock` puts them on the job's)."""
    c = trace.collectives
    ev = trace.events
    order = np.argsort(ev.start_ns[c.event], kind="stable") if len(c) else np.zeros(0, np.intp)
    rows = c.event[order]
    strings = trace.strings

    def text(sid: int) -> str:
        return strings[sid] if sid >= 0 else ""

    groups = {g.name: tuple(g.ranks) for g in trace.groups}
    return RankSummary(
        source=trace.source,
        rank=trace.rank,
        world_size=trace.world_size,
        groups=groups,
        group=[trace.groups[g].name if g >= 0 else UNKNOWN_GROUP for g in c.group[order].tolist()],
        kind=[CollectiveKind(k).label for k in c.kind[order].tolist()],
        dtype=[text(d) for d in c.dtype[order].tolist()],
        in_size=np.asarray(c.bytes[order], np.int64),
        out_size=np.full(len(order), -1, np.int64),
        seq=np.asarray(c.seq[order], np.int64),
        start_ns=np.asarray(ev.start_ns[rows], np.int64),
        end_ns=np.asarray(ev.end_ns[rows], np.int64),
        index=np.asarray(rows, np.int64),
        step_number=np.asarray(trace.steps.number, np.int64),
        step_start_ns=np.asarray(trace.steps.start_ns, np.int64),
        step_end_ns=np.asarray(trace.steps.end_ns, np.int64),
    )
