"""Hand any echo-view job (Kineto, Nsight Systems exports, predicted jobs) to
HolisticTraceAnalysis (HTA) 0.5.0's analyses (needs the ``hta`` extra).

:func:`to_hta_trace` builds the ``hta.common.trace.Trace`` HTA would have parsed from Kineto
files: one DataFrame per rank and a shared ``TraceSymbolTable``, then HTA's own steps for what
follows parsing (``transform_correlation_to_index``, ``add_iteration``, the rank alignment and
the last-step filter of ``Trace.load_traces``). How echo-view's model maps onto HTA's parse
(``hta/common/trace_parser.py``):

- ``ts``/``dur`` in µs on the job's aligned clock. With ``round_to_us`` (the default) every
  event becomes ``[ceil(ts), floor(ts + dur))`` in whole µs, as HTA rounds files with fractional
  timestamps; whole-µs files are unchanged by it.
- ``name``/``cat`` as symbol ids; ``stream`` the event's GPU stream, -1 off the GPU and for GPU
  annotations (Kineto writes ``gpu_user_annotation`` without a ``stream`` arg);
  ``correlation`` from the model; every other column of HTA's default ``args`` selection from
  the event's args, with HTA's default where absent.
- Events HTA drops while parsing are left out: instants and counters (no ``dur``) and the
  ``Trace`` span.

:func:`analysis` wraps the trace in HTA's ``TraceAnalysis``, whose methods
(``get_temporal_breakdown``, ``get_comm_comp_overlap``, ``get_gpu_kernel_breakdown``, ...) then
run unchanged.
"""

from __future__ import annotations

import tempfile
from typing import Any

import numpy as np

from echo_view.api.frames import events_frame, pandas
from echo_view.errors import UsageError
from echo_view.model import EventKind, Job

_US = 1_000
#: Kinds HTA's parser drops (``dropna(subset=["dur"])``: instants and counters have no ``dur``).
_DROPPED_KINDS = (EventKind.INSTANT.label, EventKind.COUNTER.label)


def _hta() -> Any:
    try:
        import hta.common.trace as hta_trace
    except ImportError:
        raise UsageError(
            "handing a job to HolisticTraceAnalysis needs it installed",
            hint="pip install 'echo-view[hta]' (holistictraceanalysis==0.5.0, pandas<3)",
        ) from None
    return hta_trace


#: Columns taken from the model rather than from the event's args.
_FROM_MODEL = ("stream", "correlation", "external_id")


def _arg_values(job: Job, rows: Any, specs: list[Any]) -> dict[str, list[Any]]:
    """HTA's arg columns for ``rows`` (``rank``, ``index`` pairs): the event's arg, else HTA's
    default for it."""
    traces = {t.rank: t for t in job.traces}
    cols: dict[str, list[Any]] = {s.name: [] for s in specs}
    for rank, i in zip(rows["rank"].tolist(), rows["index"].tolist(), strict=True):
        events = traces[rank].events
        args = events.args(i) if events.raw_args(i) else {}
        for s in specs:
            cols[s.name].append(args.get(s.raw_name, s.default_value))
    return cols


def to_hta_trace(
    job: Job, *, round_to_us: bool = True, include_last_profiler_step: bool = False
) -> Any:
    """``job`` as HTA's loaded ``Trace`` (see the module docstring)."""
    hta_trace = _hta()
    from hta.common.trace_symbol_table import TraceSymbolTable
    from hta.configs.parser_config import ParserConfig

    pd = pandas()
    ev = events_frame(job)
    ev = ev[~ev["kind"].isin(_DROPPED_KINDS) & ev["cat"].ne("Trace")].reset_index(drop=True)
    start_ns = ev["start_ns"].to_numpy() + _offsets(job, ev)
    end_ns = start_ns + ev["dur_ns"].to_numpy()
    if round_to_us:
        start_ns, end_ns = -(-start_ns // _US) * _US, (end_ns // _US) * _US
    origin = (int(start_ns.min()) // _US) * _US if len(start_ns) else 0
    symbols = TraceSymbolTable()
    symbols.add_symbols(sorted(set(ev["name"]) | set(ev["cat"])))
    ids = symbols.get_sym_id_map()
    specs = [s for s in ParserConfig.get_default_cfg().get_args() if s.name not in _FROM_MODEL]
    gpu_annotation = ev["kind"].eq(EventKind.GPU_ANNOTATION.label)
    hta_ev = pd.DataFrame(
        {
            "rank": ev["rank"],
            "index": ev["index"],
            "ts": (start_ns - origin) // _US if round_to_us else (start_ns - origin) / _US,
            "dur": (end_ns - start_ns) // _US if round_to_us else (end_ns - start_ns) / _US,
            "name": ev["name"].map(ids),
            "cat": ev["cat"].map(ids),
            "pid": ev["pid"],
            "tid": ev["tid"],
            "stream": ev["stream"].where(~gpu_annotation, -1),
            "correlation": ev["correlation"],
            "external_id": ev["external_id"],
            **_arg_values(job, ev, specs),
        }
    )
    traces: dict[int, Any] = {}
    for rank, df in hta_ev.groupby("rank", sort=True):
        # HTA's row labels are the event's position in its file: ``index`` here.
        df = df.drop(columns="rank").set_index(df["index"].to_numpy())
        df = hta_trace.transform_correlation_to_index(df, symbols)
        hta_trace.add_iteration(df, symbols)
        df["end"] = df["ts"] + df["dur"]
        traces[int(rank)] = df
    meta = {
        t.rank: {"distributedInfo": {"rank": t.rank, "world_size": job.world_size}}
        for t in job.traces
    }
    with tempfile.TemporaryDirectory() as empty:
        t = hta_trace.Trace(trace_files={}, trace_dir=empty)
    t.traces, t.meta_data, t.symbol_table = traces, meta, symbols
    t.align_and_filter_trace(include_last_profiler_step)
    for rank, df in t.traces.items():  # as Trace.load_traces leaves them
        df = df.set_index("index", drop=False)
        df.index.names = [None]
        t.traces[rank] = df
    t.is_parsed = True
    return t


def _offsets(job: Job, ev: Any) -> Any:
    """Each row's clock offset (puts every rank on the job's aligned clock)."""
    offsets = dict(zip(job.ranks, job.alignment.offsets_ns, strict=True))
    return ev["rank"].map(offsets).to_numpy(dtype=np.int64)


def analysis(
    job: Job, *, round_to_us: bool = True, include_last_profiler_step: bool = False
) -> Any:
    """HTA's ``TraceAnalysis`` over ``job`` (its constructor only reads files, so the loaded
    trace is attached directly)."""
    _hta()  # a one-line error when HTA is missing
    from hta.trace_analysis import TraceAnalysis

    ta = TraceAnalysis.__new__(TraceAnalysis)
    ta.t = to_hta_trace(
        job, round_to_us=round_to_us, include_last_profiler_step=include_last_profiler_step
    )
    return ta
