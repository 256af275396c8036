"""Job-level rules over an imported :class:`~echo_view.model.Job` (an input that is not Chrome
JSON, such as an Nsight Systems export, has no ``traceEvents`` to stream through the file rules).

What carries over from the Kineto rules: GPU work without its launch (EV601), a launch without
its GPU work (EV602), GPU work that starts before its launch (EV603), no step annotations
(EV605, info), and every cross-rank rule (EV7xx). Locations name the file, the rank and the
source row: the table an event kind came from (``Trace.metadata["source_tables"]``, when the
importer records it) with the row's correlation id and start time, not a ``traceEvents`` index.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model import GPU_WORK_KINDS, SEPARATE_RUNS, EventKind, JobHead, LaneKind, Trace
from echo_view.units import format_duration, ns_to_us_text
from echo_view.validate.crossrank import check_job
from echo_view.validate.findings import FileFacts, Finding, Location, Report, Selection
from echo_view.validate.kineto import is_launch_name, match_launches
from echo_view.validate.summary import RankSummary, on_job_clock, summary_from_trace

_GPU_WORK = np.array([int(k) for k in GPU_WORK_KINDS])
_API = np.array([int(EventKind.RUNTIME), int(EventKind.DRIVER)])


@dataclass(frozen=True, eq=False)
class RankCheck:
    """One rank of an imported job, checked where it was read: the findings of the per-rank
    rules, its :class:`RankSummary` for the cross-rank rules (times on its own clock) and
    where each of the summary's collectives came from (row -> source location)."""

    source: str
    rank: int
    events: int
    findings: Report
    summary: RankSummary
    rows: dict[int, Location]


def check_rank(trace: Trace, selection: Selection, keep: int) -> RankCheck:
    """EV601-EV603 and EV605 on one rank, and what the cross-rank rules need of it."""
    checked = summarise_rank(trace, selection, keep)
    _launch_rules(trace, checked.findings)
    _step_rule(trace, checked.findings)
    return checked


def join_rank_checks(head: JobHead, checks: Sequence[RankCheck], report: Report, name: str) -> None:
    """Record each source file of an imported job in ``report``, with its ranks'
    :func:`check_rank` findings (EV601-EV603, EV605; in rank order), and run the EV7xx rules
    across its ranks (``name`` locates job-wide findings): from the job's head and the ranks'
    checks, without the job's events."""
    form = str(head.meta.get("format", "model"))
    by_source: dict[str, list[RankCheck]] = {}
    for c in checks:
        by_source.setdefault(c.source, []).append(c)
    for source, ranks in by_source.items():
        report.files.append(
            FileFacts(
                path=source,
                form=form,
                events=sum(c.events for c in ranks),
                rank=ranks[0].rank if len(ranks) == 1 else None,
                world_size=head.world_size,
            )
        )
    for c in checks:
        report.merge(c.findings)
    cross_rank_checks(head, checks, report, name)


def summarise_rank(trace: Trace, selection: Selection, keep: int) -> RankCheck:
    """What the cross-rank rules need of one rank, with no finding yet: the per-rank rules
    are :func:`check_rank`'s (a file whose events the file rules have already checked, an
    echo-view export of several ranks, needs only this)."""
    summary = summary_from_trace(trace)
    rows = {r: row_location(trace, r) for r in summary.index.tolist()}
    return RankCheck(trace.source, trace.rank, len(trace.events), Report(selection, keep),
                     summary, rows)  # fmt: skip


def cross_rank_checks(
    head: JobHead, checks: Sequence[RankCheck], report: Report, name: str
) -> None:
    """The EV7xx rules across the ranks of ``checks`` (``name`` locates job-wide findings),
    their collectives located by source row."""
    if head.alignment.method == SEPARATE_RUNS:
        # Ranks of different runs need not run the same collectives or end them together.
        report.add(Finding("EV711", head.alignment.note, Location(file=name, where="job")))
    elif len(checks) > 1:
        # The cross-rank rules locate collectives by row; rewrite those rows as source rows.
        scratch = Report(report.selection, report.keep)
        offsets = head.alignment.offsets_ns
        summaries = [
            on_job_clock(c.summary, off, head.world_size)
            for c, off in zip(checks, offsets, strict=True)
        ]
        check_job(summaries, scratch, name)
        by_rank = {(c.source, c.rank): c.rows for c in checks}
        for tally in scratch:
            report.add_many(tally.code, tally.count, (_relocate(f, by_rank) for f in tally.first))


def row_location(trace: Trace, row: int) -> Location:
    """Where event ``row`` of ``trace`` came from: table, correlation id, start, thread."""
    ev = trace.events
    kind = EventKind(int(ev.kind[row]))
    tables: Any = trace.metadata.get("source_tables", {})
    table = tables.get(kind.label) if isinstance(tables, dict) else None
    corr = int(ev.correlation[row])
    start = int(ev.start_ns[row])
    lane = trace.lanes[int(ev.lane[row])]
    ts: str | None = None
    if table:  # the row's own key values, so that a SQL query finds it
        keys = f"start={start}" + (f", correlationId={corr}" if corr >= 0 else "")
        where = f"{table} row ({keys})"
    else:
        where = f"{kind.label} event {row}" + (f" (correlation {corr})" if corr >= 0 else "")
        ts = ns_to_us_text(start)
    if lane.kind == LaneKind.CPU_THREAD:
        return Location(
            file=trace.source, rank=trace.rank, where=where, ts=ts, pid=lane.pid, tid=lane.tid
        )
    on = f" on GPU {lane.device}" if lane.device >= 0 else ""
    return Location(file=trace.source, rank=trace.rank, where=f"{where}, {lane.name}{on}", ts=ts)


def _relocate(f: Finding, by_rank: dict[tuple[str, int], dict[int, Location]]) -> Finding:
    loc = f.location
    rows = by_rank.get((loc.file or "", -1 if loc.rank is None else loc.rank))
    if rows is None or loc.index is None or loc.index not in rows:
        return f
    return Finding(f.code, f.message, rows[loc.index])


def _lane_pids(trace: Trace) -> npt.NDArray[np.int64]:
    """A dense process number per lane (pids may be strings)."""
    dense: dict[Any, int] = {}
    keys = [(lane.kind == LaneKind.CPU_THREAD, lane.pid) for lane in trace.lanes]
    return np.array([dense.setdefault(k, len(dense)) for k in keys] or [0], dtype=np.int64)


def _is_launch(trace: Trace, names: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.bool_]:
    """Whether each API call name launches GPU work (decided once per distinct name)."""
    if not len(names):
        return np.zeros(0, dtype=bool)
    uniq, inv = np.unique(names, return_inverse=True)
    flags = [is_launch_name(s) for s in (trace.strings[int(g)] for g in uniq.tolist())]
    out: npt.NDArray[np.bool_] = np.array(flags, dtype=bool)[inv.reshape(-1)]
    return out


def _launch_rules(trace: Trace, report: Report) -> None:
    if not any(report.wants(c) for c in ("EV601", "EV602", "EV603")):
        return
    ev = trace.events
    gpu = np.flatnonzero(np.isin(ev.kind, _GPU_WORK))
    api = np.flatnonzero(np.isin(ev.kind, _API))
    if not len(gpu) and not len(api):
        return
    pid = _lane_pids(trace)
    corr = np.asarray(ev.correlation, dtype=np.int64)
    start = np.asarray(ev.start_ns, dtype=np.int64)
    launch_of = match_launches(
        pid[ev.lane[gpu]], corr[gpu], pid[ev.lane[api]], corr[api], start[api]
    )
    no_launch = gpu[(corr[gpu] >= 0) & (launch_of < 0)]
    _emit(report, "EV601", trace, no_launch, lambda r: f"{trace.name(r)!r} has no launch")
    used = np.zeros(len(api), dtype=bool)
    used[launch_of[launch_of >= 0]] = True
    no_work = api[(corr[api] >= 0) & _is_launch(trace, ev.name[api]) & ~used]
    _emit(report, "EV602", trace, no_work, lambda r: f"{trace.name(r)!r} has no GPU event")
    matched = np.flatnonzero(launch_of >= 0)
    work_start, api_start = start[gpu[matched]], start[api[launch_of[matched]]]
    is_early = work_start < api_start
    early = gpu[matched[is_early]]
    lead = dict(zip(early.tolist(), (api_start - work_start)[is_early].tolist(), strict=True))
    _emit(
        report,
        "EV603",
        trace,
        early,
        lambda r: f"{trace.name(r)!r} starts {format_duration(lead[r])} before its launch",
    )


def _step_rule(trace: Trace, report: Report) -> None:
    """EV605 when a rank has CPU and GPU activity but the import found no steps."""
    if not report.wants("EV605") or len(trace.steps):
        return
    kinds = trace.events.kind
    if np.isin(kinds, _GPU_WORK).any() and np.isin(kinds, _API).any():
        msg = "no step annotations (NVTX or profiler ranges named ProfilerStep#N, step N, ...)"
        report.add(Finding("EV605", msg, Location(file=trace.source, rank=trace.rank)))


def _emit(
    report: Report, code: str, trace: Trace, rows: npt.NDArray[np.intp], message: Any
) -> None:
    if not len(rows) or not report.wants(code):
        return

    def first() -> Iterable[Finding]:
        for r in rows.tolist():
            yield Finding(code, message(r), row_location(trace, r))

    report.add_many(code, len(rows), first())
