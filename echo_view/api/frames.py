"""pandas DataFrames of echo-view's columnar model and analyses (needs the ``analysis`` extra).

Column names follow HolisticTraceAnalysis (HTA) 0.5.0's trace DataFrame where it has one
(``hta/common/trace.py``, ``hta/configs/default_event_args.py``): ``index`` (row of the event in
its rank's trace), ``ts``/``dur``/``end`` (µs, on the job's aligned clock, 0 at the job's first
event, as HTA aligns ranks), ``name``, ``cat``, ``pid``, ``tid``, ``stream`` (-1 off the GPU),
``correlation``, ``external_id``, ``iteration`` (step number, -1 outside every step),
``bytes``, ``msg_dtype``, ``group_size``, ``process_group_name``, ``process_group_desc``,
``process_group_ranks``. HTA keeps ``name``/``cat`` as symbol ids; here they are the strings.
echo-view's own columns: ``rank``, ``kind`` (:class:`~echo_view.model.EventKind` label),
``device``, and the exact integer times ``start_ns``/``dur_ns`` on the trace's own clock (the
clock ``echo-view info --json`` reports). Unknown integers are -1, as in the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.analysis.breakdown import COMM, COMPUTE, MEMORY, gpu_work
from echo_view.analysis.diff import JobDiff, Pair
from echo_view.analysis.steps import find_steps, step_of_gpu_work
from echo_view.analysis.summary import STEP_FIELDS, JobSummary, collective_events
from echo_view.errors import UsageError
from echo_view.model import NONE, CollectiveKind, EventKind, Job, LaneKind, Trace

I64 = npt.NDArray[np.int64]
DataFrame = Any  # pandas.DataFrame; pandas is optional, so it is not imported for typing

#: HTA's kernel types (``hta.common.types.KernelType``) for echo-view's GPU work labels.
KERNEL_TYPES = {COMPUTE: "COMPUTATION", COMM: "COMMUNICATION", MEMORY: "MEMORY"}


def pandas() -> Any:
    """The pandas module, or a one-line error naming the extra that installs it."""
    try:
        import pandas as pd
    except ImportError:
        raise UsageError(
            "DataFrames need pandas, which is not installed",
            hint="pip install 'echo-view[analysis]'",
        ) from None
    return pd


def _iteration(trace: Trace) -> I64:
    """Step number of every event: GPU work by the step that launched it
    (:func:`~echo_view.analysis.steps.step_of_gpu_work`), other events by the step their start
    falls in; -1 outside every step."""
    table = find_steps(trace).table
    ev = trace.events
    out = np.full(len(ev), NONE, dtype=np.int64)
    if not len(table):
        return out
    order = np.argsort(table.start_ns, kind="stable")
    starts = np.asarray(table.start_ns)[order]
    ends = np.asarray(table.end_ns)[order]
    numbers = np.asarray(table.number)[order]
    pos = np.searchsorted(starts, ev.start_ns, side="right") - 1
    inside = pos >= 0
    inside[inside] &= ev.start_ns[inside] < ends[pos[inside]]
    out[inside] = numbers[pos[inside]]
    rows, idx = step_of_gpu_work(trace, table)
    work = trace.mask(EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET)
    out[work] = NONE
    out[rows] = np.asarray(table.number)[idx]
    return out


def _lane_column(trace: Trace, get: Callable[[Any], Any], dtype: Any) -> Any:
    values = np.array([get(lane) for lane in trace.lanes] or [0], dtype=dtype)
    return values[trace.events.lane]


def _trace_columns(trace: Trace, offset_ns: int, origin_ns: int) -> dict[str, Any]:
    """The event columns of one rank (see the module docstring)."""
    ev = trace.events
    strings = np.array(list(trace.strings.strings) or [""], dtype=object)
    start_us = (ev.start_ns + (offset_ns - origin_ns)) / 1e3
    gpu_lane = _lane_column(trace, lambda ln: ln.kind == LaneKind.GPU_STREAM, bool)
    return {
        "rank": np.full(len(ev), trace.rank, dtype=np.int64),
        "index": np.arange(len(ev), dtype=np.int64),
        "ts": start_us,
        "dur": ev.dur_ns / 1e3,
        "end": start_us + ev.dur_ns / 1e3,
        "name": strings[ev.name],
        "cat": np.where(ev.cat >= 0, strings[np.maximum(ev.cat, 0)], ""),
        "kind": np.array([k.label for k in EventKind], dtype=object)[ev.kind],
        "pid": _lane_column(trace, lambda ln: ln.pid, object),
        "tid": _lane_column(trace, lambda ln: ln.tid, object),
        "stream": np.where(gpu_lane, _lane_column(trace, lambda ln: ln.stream, np.int64), NONE),
        "device": _lane_column(trace, lambda ln: ln.device, np.int64),
        "correlation": np.asarray(ev.correlation, dtype=np.int64),
        "external_id": np.asarray(ev.external_id, dtype=np.int64),
        "iteration": _iteration(trace),
        "start_ns": np.asarray(ev.start_ns, dtype=np.int64),
        "dur_ns": np.asarray(ev.dur_ns, dtype=np.int64),
    }


def _frame(job: Job, rows_of: Callable[[Trace], tuple[I64, dict[str, Any]]]) -> DataFrame:
    """One DataFrame over all ranks: per trace, the event columns of the rows ``rows_of``
    picks, plus the extra columns it returns."""
    pd = pandas()
    origin = job.start_ns()
    parts = []
    for trace, offset in zip(job.traces, job.alignment.offsets_ns, strict=True):
        rows, extra = rows_of(trace)
        cols = {k: v[rows] for k, v in _trace_columns(trace, offset, origin).items()}
        parts.append(pd.DataFrame({**cols, **extra}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def events_frame(job: Job) -> DataFrame:
    """Every event of every rank, one row each."""
    return _frame(job, lambda t: (np.arange(len(t.events), dtype=np.int64), {}))


def kernels_frame(job: Job) -> DataFrame:
    """The GPU work (kernels, memcpy, memset) of every rank, with HTA's ``kernel_type``
    (``COMPUTATION``, ``COMMUNICATION``, ``MEMORY``) from echo-view's labels
    (:func:`~echo_view.analysis.breakdown.gpu_work`, the labels ``echo-view info`` uses)."""

    def rows(trace: Trace) -> tuple[I64, dict[str, Any]]:
        work = gpu_work(trace)
        types = np.array([KERNEL_TYPES[i] for i in range(len(KERNEL_TYPES))], dtype=object)
        return work.rows, {"kernel_type": types[work.labels]}

    return _frame(job, rows)


def collectives_frame(job: Job) -> DataFrame:
    """One row per collective (:func:`~echo_view.analysis.summary.collective_events`: the
    collective table, then communication kernels it does not list): the event's columns plus
    ``collective`` (kind), ``bytes`` (payload per rank), ``gpu_dur_ns`` (the GPU time
    ``echo-view info`` counts), ``msg_dtype``, ``process_group_name``, ``process_group_desc``,
    ``group_size``, ``process_group_ranks``, ``seq``, ``algorithm``, ``protocol``."""

    def rows(trace: Trace) -> tuple[I64, dict[str, Any]]:
        ce = collective_events(trace)
        ct = trace.collectives

        def pick(col: npt.NDArray[Any]) -> list[int]:
            """``col`` of each collective's table row; -1 for kernels the table lacks."""
            listed = ce.table_row >= 0
            out = np.full(len(ce.event), NONE, dtype=np.int64)
            out[listed] = col[ce.table_row[listed]]
            return [int(x) for x in out]

        def text(col: npt.NDArray[Any]) -> list[str]:
            return [trace.strings[i] if i >= 0 else "" for i in pick(col)]

        groups = [trace.groups[g] if g >= 0 else None for g in pick(ct.group)]
        return ce.event, {
            "collective": [CollectiveKind(int(k)).label for k in ce.kind],
            "bytes": ce.bytes,
            "gpu_dur_ns": ce.gpu_ns,
            "msg_dtype": text(ct.dtype),
            "process_group_name": [g.name if g else "" for g in groups],
            "process_group_desc": [g.description if g else "" for g in groups],
            "group_size": [g.size if g else NONE for g in groups],
            "process_group_ranks": [g.ranks if g else () for g in groups],
            "seq": pick(ct.seq),
            "algorithm": text(ct.algorithm),
            "protocol": text(ct.protocol),
        }

    return _frame(job, rows)


def summary_frame(summary: JobSummary) -> DataFrame:
    """One row per (rank, device, step) of ``echo-view info``'s breakdown: its ``per_step``
    objects with ``rank``, ``device``, ``step_rule`` and ``steps_detected``. Unknown values
    (a rank without GPU work) are ``<NA>``."""
    pd = pandas()
    records = [
        {
            "rank": r.rank,
            "device": r.device,
            "step_rule": r.step_rule,
            "steps_detected": r.steps_detected,
            **step,
        }
        for r in summary.rows
        for step in r.per_step
    ]
    # The columns named: a job without GPU steps gives no records, and the frame its columns.
    columns = ["rank", "device", "step_rule", "steps_detected", *STEP_FIELDS]
    df = pd.DataFrame.from_records(records, columns=columns)
    for col in df.columns:
        if col.endswith("_ns") or col in ("rank", "device", "step"):
            df[col] = df[col].astype("Int64")
    return df


def _pairs(items: list[tuple[dict[str, Any], Pair]], ref_b: bool) -> DataFrame:
    pd = pandas()
    return pd.DataFrame.from_records([{**key, **pair.to_json(ref_b)} for key, pair in items])


def diff_frames(d: JobDiff) -> dict[str, DataFrame]:
    """``echo-view diff``'s tables: ``ranks`` (step time per aligned rank), ``categories``
    (mean over ranks), ``kernels`` and ``collectives`` (per step, by |delta|). Each row holds
    ``a_ns``, ``b_ns``, ``delta_ns``, ``delta_pct`` and ``error_pct`` as ``diff --json``
    gives them."""
    ref_b = d.reference_is_b
    ranks = [
        (
            {
                "rank": r.rank,
                "a_device": r.a_device,
                "b_device": r.b_device,
                "steps": len(r.steps_a),
                "step_alignment": r.step_alignment,
            },
            r.step,
        )
        for r in d.ranks
    ]
    cats = [({"category": name}, pair) for name, pair in d.categories.items()]

    def items(rows: list[Any]) -> list[tuple[dict[str, Any], Pair]]:
        return [
            ({"name": i.name, "a_count": i.a_count, "b_count": i.b_count}, i.time) for i in rows
        ]

    return {
        "ranks": _pairs(ranks, ref_b),
        "categories": _pairs(cats, ref_b),
        "kernels": _pairs(items(d.kernels), ref_b),
        "collectives": _pairs(items(d.collectives), ref_b),
    }


def records_frame(records: list[dict[str, Any]]) -> DataFrame:
    """A DataFrame of a report's list of objects (e.g. ``simulate --json``'s ``ranks``)."""
    return pandas().DataFrame.from_records(records)
