"""Training steps of one rank: the profiler's ``ProfilerStep#N`` spans, or steps detected.

Rules, tried in this order (the first that applies wins; :attr:`StepDetection.rule` names it):

1. ``trace`` — the trace already carries steps (the importer read ``ProfilerStep#N``).
2. ``profiler_step`` — events on CPU threads named ``ProfilerStep#N``; several rows with one
   ``N`` (one per thread) merge into one step spanning all of them.
3. ``optimizer_step`` (detected) — CPU events named ``Optimizer.step#<Class>.step`` (what
   ``torch.optim`` records around every ``step()`` call). Their ends cut the activity of their
   thread into steps: ``[first event, end 1], [end 1, end 2], ..., [end k, last event]``. An
   optimizer step ends an iteration, so every cut is an iteration boundary.
4. ``repeated_annotation`` (detected) — the user annotation name that occurs most often (at
   least twice) among the *top-level* CPU annotations of one thread (not enclosed by another
   annotation or operator there; ties go to the name seen first). Its starts cut that thread's
   activity the same way: ``[first event, start 1], [start 1, start 2], ..., [start k, last
   event]``; an empty leading piece is dropped.
5. ``window`` (detected) — one step over the whole trace (first to last CPU event, or all events
   when there is no CPU thread).

Detected steps are numbered from 0. ``gpu_end_ns`` is filled where it is unknown (-1): the
latest end of the GPU work *launched* inside the step, found through the launch's correlation
id; GPU work with no launch in the trace is placed by its own start time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from echo_view.model import GPU_KINDS, GPU_WORK_KINDS, NONE, EventKind, LaneKind, StepTable, Trace

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

# At most 18 digits: a step number is an int64 (a longer one marks no step).
_PROFILER_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d{1,18})$")
_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#[^.]*\.step$")
# CPU event kinds that can enclose an annotation (python frames wrap everything, so they do
# not count when deciding what is top-level).
_ENCLOSING = (EventKind.CPU_OP, EventKind.USER_ANNOTATION)


@dataclass(frozen=True, eq=False)
class StepDetection:
    """Steps of one trace and the rule that found them."""

    table: StepTable
    rule: str


def steps_of(trace: Trace) -> StepTable:
    """The trace's steps (see the module docstring for the rules), with ``gpu_end_ns`` filled."""
    return find_steps(trace).table


def find_steps(trace: Trace) -> StepDetection:
    """Like :func:`steps_of`, also naming the rule that produced the steps."""
    if len(trace.steps):
        return StepDetection(_with_gpu_end(trace, trace.steps), "trace")
    cpu = trace.lane_mask(LaneKind.CPU_THREAD)
    for rule, finder in (
        ("profiler_step", _profiler_steps),
        ("optimizer_step", _optimizer_steps),
        ("repeated_annotation", _annotation_steps),
    ):
        found = finder(trace, cpu)
        if found is not None and len(found):
            return StepDetection(_with_gpu_end(trace, found), rule)
    return StepDetection(_with_gpu_end(trace, _window_step(trace, cpu)), "window")


def launch_start_ns(trace: Trace) -> I64:
    """For every event, the start of the CPU event that launched it (-1 when none is known).

    A GPU event and its launch (``cudaLaunchKernel``, ``cudaMemcpyAsync``...) share a
    correlation id; when several CPU events carry one id the earliest counts.
    """
    ev = trace.events
    out = np.full(len(ev), NONE, dtype=np.int64)
    gpu = trace.mask(*GPU_KINDS) & (ev.correlation >= 0)
    cpu = trace.lane_mask(LaneKind.CPU_THREAD) & (ev.correlation >= 0) & ~trace.mask(*GPU_KINDS)
    if not gpu.any() or not cpu.any():
        return out
    corr = ev.correlation[cpu]
    start = ev.start_ns[cpu]
    order = np.lexsort((start, corr))
    corr, start = corr[order], start[order]
    first = np.ones(len(corr), dtype=bool)
    first[1:] = corr[1:] != corr[:-1]
    corr, start = corr[first], start[first]
    rows = np.flatnonzero(gpu)
    want = ev.correlation[rows]
    idx = np.minimum(np.searchsorted(corr, want), len(corr) - 1)
    hit = corr[idx] == want
    out[rows[hit]] = start[idx[hit]]
    return out


def step_of_gpu_work(trace: Trace, steps: StepTable) -> tuple[I64, I64]:
    """``(rows, step index)`` of the GPU work (kernels, copies, sets) that belongs to a step.

    Work belongs to the step during whose CPU span it was launched; work without a known
    launch belongs to the step during which it started. Steps must not overlap.
    """
    work = np.flatnonzero(trace.mask(*GPU_WORK_KINDS))
    if not len(work) or not len(steps):
        return work[:0].astype(np.int64), work[:0].astype(np.int64)
    launch = launch_start_ns(trace)[work]
    t = np.where(launch != NONE, launch, trace.events.start_ns[work])
    order = np.argsort(steps.start_ns, kind="stable")
    starts = np.asarray(steps.start_ns)[order]
    ends = np.asarray(steps.end_ns)[order]
    pos = np.searchsorted(starts, t, side="right") - 1
    ok = pos >= 0
    ok[ok] &= t[ok] < ends[pos[ok]]
    return work[ok].astype(np.int64), order[pos[ok]].astype(np.int64)


def _with_gpu_end(trace: Trace, steps: StepTable) -> StepTable:
    """``steps`` with unknown ``gpu_end_ns`` computed from the work launched in each step."""
    gpu_end = np.asarray(steps.gpu_end_ns, dtype=np.int64).copy()
    unknown = gpu_end == NONE
    if unknown.any():
        rows, idx = step_of_gpu_work(trace, steps)
        lowest = np.iinfo(np.int64).min  # (not NONE: a work end may be negative)
        computed = np.full(len(steps), lowest, dtype=np.int64)
        np.maximum.at(computed, idx, trace.events.end_ns[rows])
        computed[computed == lowest] = NONE
        gpu_end[unknown] = computed[unknown]
    return replace(steps, gpu_end_ns=gpu_end)


def _table(
    number: npt.ArrayLike, start: npt.ArrayLike, end: npt.ArrayLike, detected: bool
) -> StepTable:
    s = np.asarray(start, dtype=np.int64)
    order = np.argsort(s, kind="stable")
    return StepTable(
        number=np.asarray(number, dtype=np.int64)[order],
        start_ns=s[order],
        end_ns=np.asarray(end, dtype=np.int64)[order],
        gpu_end_ns=np.full(len(s), NONE, dtype=np.int64),
        detected=detected,
    )


def _name_rows(trace: Trace, pattern: re.Pattern[str], among: Mask) -> tuple[I64, list[str]]:
    """Rows of ``among`` whose name matches ``pattern`` (one regex call per distinct name)."""
    ids = np.unique(trace.events.name[among])
    hits = [int(i) for i in ids if pattern.match(trace.strings[int(i)])]
    rows = np.flatnonzero(among & np.isin(trace.events.name, np.array(hits, dtype=np.int32)))
    return rows, [trace.strings[i] for i in hits]


def _step_number(name: str) -> int:
    m = _PROFILER_STEP.match(name)
    return int(m.group(1)) if m else NONE


def _profiler_steps(trace: Trace, cpu: Mask) -> StepTable | None:
    rows, _ = _name_rows(trace, _PROFILER_STEP, cpu)
    if not len(rows):
        return None
    names = trace.events.name[rows]
    uniq, inv = np.unique(names, return_inverse=True)
    numbers = np.array([_step_number(trace.strings[int(i)]) for i in uniq], dtype=np.int64)
    start = np.full(len(uniq), np.iinfo(np.int64).max, dtype=np.int64)
    end = np.full(len(uniq), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(start, inv, trace.events.start_ns[rows])
    np.maximum.at(end, inv, trace.events.end_ns[rows])
    return _table(numbers, start, end, detected=False)


def _cut_lane(trace: Trace, lane: int, cuts: I64) -> StepTable:
    """Cut the activity of ``lane`` at the times ``cuts`` into consecutive steps."""
    on_lane = trace.events.lane == lane
    first = int(trace.events.start_ns[on_lane].min())
    last = int(trace.events.end_ns[on_lane].max())
    edges = np.unique(np.concatenate([[first], np.clip(cuts, first, last), [last]]))
    start, end = edges[:-1], edges[1:]
    return _table(np.arange(len(start)), start, end, detected=True)


def _optimizer_steps(trace: Trace, cpu: Mask) -> StepTable | None:
    rows, _ = _name_rows(trace, _OPTIMIZER_STEP, cpu)
    if not len(rows):
        return None
    lanes, counts = np.unique(trace.events.lane[rows], return_counts=True)
    lane = int(lanes[np.argmax(counts)])
    rows = rows[trace.events.lane[rows] == lane]
    return _cut_lane(trace, lane, trace.events.end_ns[rows])


def _top_level(trace: Trace, rows: I64) -> Mask:
    """Which of ``rows`` (events on CPU threads) no other event of ``rows`` encloses."""
    ev = trace.events
    lane = ev.lane[rows]
    start = ev.start_ns[rows]
    end = start + ev.dur_ns[rows]
    n = len(rows)
    # Per thread, by start, longer first, an event is top-level when it starts at or after the
    # furthest end reached by the events before it. One sort and one running maximum for all
    # threads together (a trace may have 10^5 of them): times become their ranks among all
    # starts and ends, shifted by the thread's place, so that each thread's running maximum
    # starts above everything of the threads before it.
    order = np.lexsort((-end, start, lane))
    lane_o = lane[order]
    first = np.ones(n, dtype=bool)
    first[1:] = lane_o[1:] != lane_o[:-1]
    base = (np.cumsum(first) - 1).astype(np.int64) * (2 * n + 1)
    _, rank = np.unique(np.concatenate([start[order], end[order]]), return_inverse=True)
    reach = np.maximum.accumulate(rank[n:] + base)
    top_o = np.ones(n, dtype=bool)
    top_o[1:] = rank[1:n] + base[1:] >= reach[:-1]
    top_o[first] = True
    top = np.empty(n, dtype=bool)
    top[order] = top_o
    return top


def _annotation_steps(trace: Trace, cpu: Mask) -> StepTable | None:
    enclosing = np.flatnonzero(cpu & trace.mask(*_ENCLOSING) & (trace.events.dur_ns > 0))
    if not len(enclosing):
        return None
    top = enclosing[_top_level(trace, enclosing)]
    ann = top[trace.events.kind[top] == int(EventKind.USER_ANNOTATION)]
    if not len(ann):
        return None
    keys = trace.events.lane[ann].astype(np.int64) << 32 | trace.events.name[ann].astype(np.int64)
    uniq, first_pos, counts = np.unique(keys, return_index=True, return_counts=True)
    if counts.max() < 2:
        return None
    # Most frequent; ties to the one whose first occurrence is earliest.
    first_start = trace.events.start_ns[ann][first_pos]
    best = np.lexsort((first_start, -counts))[0]
    rows = ann[keys == uniq[best]]
    return _cut_lane(trace, int(trace.events.lane[rows[0]]), trace.events.start_ns[rows])


def _window_step(trace: Trace, cpu: Mask) -> StepTable:
    sel = cpu if cpu.any() else np.ones(len(trace), dtype=bool)
    if not sel.any():
        return StepTable.empty()
    # From the first CPU event or GPU work, whichever is earlier: work launched before the
    # capture began (no launch in the trace) was left out of every step.
    first = sel | trace.mask(*GPU_WORK_KINDS)
    start = int(trace.events.start_ns[first].min())
    end = int(trace.events.end_ns[sel].max())
    return _table([0], [start], [end], detected=True)
