"""EV6xx: PyTorch profiler (Kineto) semantics, and the per-rank summary for EV7xx.

A GPU kernel, memcpy or memset shares ``args.correlation`` with the CUDA/HIP runtime (or
driver) call that launched it; a launch cannot start after its GPU work; the profiler's
recording window is the ``Trace`` span ("PyTorch Profiler (0)"); training loops mark steps with
``ProfilerStep#N``. While the events stream by, this rule also gathers the collectives and
steps of the rank (:class:`~echo_view.validate.crossrank.RankSummary`).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model import CollectiveKind, collective_kind_from_name, parse_comm_kernel_name
from echo_view.model.job import group_ranks
from echo_view.units import format_duration
from echo_view.validate.context import FileContext
from echo_view.validate.events import (
    PH,
    T_BIG_FLOAT,
    T_FLOAT,
    T_INT,
    T_STRING,
    UNSET,
    EventChunk,
    Interner,
)
from echo_view.validate.findings import Finding, Severity, define
from echo_view.validate.kineto_args import (
    KinetoArgs,
    as_int,
    decode_args,
    rank_summary,
)
from echo_view.validate.nesting import _Cols
from echo_view.validate.summary import UNKNOWN_GROUP, RankSummary

define(
    "EV601",
    Severity.WARNING,
    "GPU work without a launch",
    "no runtime/driver event has this kernel's args.correlation: the launch was not recorded "
    "(window edge, or a trace filtered or sampled after capture)",
)
define(
    "EV602",
    Severity.WARNING,
    "launch without GPU work",
    "a kernel/memcpy/memset launch has no GPU event with its correlation: the GPU side was "
    "not recorded (window edge, CUPTI buffer overflow)",
)
define(
    "EV603",
    Severity.ERROR,
    "GPU work starts before its launch",
    "a kernel cannot start before the call that launched it: the CPU and GPU clocks are "
    "misaligned or the correlation ids are mixed up",
)
define(
    "EV604",
    Severity.WARNING,
    "event outside the profiling window",
    "the event lies outside the profiler's Trace span; it was recorded after the window "
    "closed (or before it opened) and may be incomplete",
)
define(
    "EV605",
    Severity.INFO,
    "no ProfilerStep annotations",
    "wrap each iteration in torch.profiler's schedule (prof.step()) so steps are marked; "
    "step analyses fall back to detecting steps from the timeline",
)

GPU_CATS = frozenset({"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"})
RUNTIME_CATS = frozenset(
    {
        "cuda_runtime",
        "Runtime",
        "cuda_driver",
        "Driver",
        "privateuse1_runtime",
        "privateuse1_driver",
        "xpu_runtime",
        "xpu_driver",
        "mtia_runtime",
    }
)
CPU_OP_CATS = frozenset({"cpu_op", "Operator", "user_annotation"})
_LAUNCH = re.compile(r"launch|memcpy|memset", re.IGNORECASE)
_NOT_LAUNCH = re.compile(r"hostfunc|launchhost|memcpytosymbol|memcpyfromsymbol|peer", re.IGNORECASE)
_STEP = re.compile(r"^ProfilerStep#(\d{1,18})$")  # an int64 step number
_GOOD = np.array([T_INT, T_FLOAT, T_BIG_FLOAT, T_STRING], dtype=np.uint8)

# Classes of interned strings (bit flags), computed once per distinct string.
_C_GPU, _C_RUNTIME, _C_LAUNCH, _C_COMM, _C_RPC, _C_STEP, _C_GPU_ANN, _C_TRACE, _C_CPU = (
    1,
    2,
    4,
    8,
    16,
    32,
    64,
    128,
    256,
)


class KinetoRule:
    """Launch/kernel correlation, the profiling window, steps, and the rank's collectives."""

    def __init__(self) -> None:
        self.cls = np.zeros(0, dtype=np.uint16)
        self.step_no = np.zeros(0, dtype=np.int64)
        self.gpu = _Cols(corr="i8", start="i8", index="i8", thread="i4", name="i4")
        self.rt = _Cols(corr="i8", start="i8", index="i8", thread="i4", launch="?")
        self.steps = _Cols(number="i8", start="i8", end="i8")
        # The profiler's Trace spans (start, end, index): one per rank in a merged file.
        self.windows: list[tuple[int, int, int]] = []
        self.coll_gpu: list[tuple[Any, ...]] = []
        self.coll_cpu: list[tuple[Any, ...]] = []
        self.pg_ranks: dict[str, tuple[int, ...]] = {}
        self.seen_gpu = self.seen_cpu = False

    def _classes(self, ctx: FileContext) -> None:
        keys = ctx.strings.table.keys_
        old = len(self.cls)
        if old == len(keys):
            return
        cls = np.zeros(len(keys) - old, dtype=np.uint16)
        steps = np.full(len(keys) - old, -1, dtype=np.int64)
        for j, s in enumerate(keys[old:]):
            if not isinstance(s, str):
                continue
            c = 0
            if s in GPU_CATS:
                c |= _C_GPU
            if s in RUNTIME_CATS:
                c |= _C_RUNTIME
            if s in CPU_OP_CATS:
                c |= _C_CPU
            if s == "gpu_user_annotation":
                c |= _C_GPU_ANN
            if s == "Trace":
                c |= _C_TRACE
            if is_launch_name(s):
                c |= _C_LAUNCH
            if parse_comm_kernel_name(s) is not None:
                c |= _C_COMM
            if s == "record_param_comms":
                c |= _C_RPC
            m = _STEP.match(s)
            if m:
                c |= _C_STEP
                steps[j] = int(m.group(1))
            cls[j] = c
        self.cls = np.concatenate([self.cls, cls])
        self.step_no = np.concatenate([self.step_no, steps])

    def visit(self, chunk: EventChunk, ctx: FileContext) -> None:
        self._classes(ctx)
        if not len(chunk):
            return
        # One spare class so that indexing works when no event has a name or category yet.
        cls = np.append(self.cls, np.zeros(1, self.cls.dtype))
        cat_c = np.where(chunk.cat >= 0, cls[np.maximum(chunk.cat, 0)], 0)
        name_c = np.where(chunk.name >= 0, cls[np.maximum(chunk.name, 0)], 0)
        x = (chunk.ph == PH["X"]) & np.isin(chunk.ts_kind, _GOOD) & np.isin(chunk.dur_kind, _GOOD)
        ev = chunk.events
        start, end = chunk.ts_ns, chunk.ts_ns + chunk.dur_ns

        gpu = np.flatnonzero(x & ((cat_c & _C_GPU) != 0))
        rt = np.flatnonzero(x & ((cat_c & _C_RUNTIME) != 0))
        cpu = np.flatnonzero(x & ((cat_c & _C_CPU) != 0))
        self.seen_gpu |= bool(len(gpu) or len(rt))
        self.seen_cpu |= bool(len(cpu))
        rpc = cpu[(name_c[cpu] & _C_RPC) != 0]
        rows = np.concatenate([gpu, rt, rpc])
        args = decode_args([ev[r].args for r in rows.tolist()])
        corr = _correlations(args)
        ng, nr = len(gpu), len(rt)
        if ng:
            self.gpu.add(
                corr=corr[:ng],
                start=start[gpu],
                index=gpu + chunk.first,
                thread=chunk.thread[gpu],
                name=chunk.name[gpu],
            )
        if nr:
            self.rt.add(
                corr=corr[ng : ng + nr],
                start=start[rt],
                index=rt + chunk.first,
                thread=chunk.thread[rt],
                launch=(name_c[rt] & _C_LAUNCH) != 0,
            )
        comm = (name_c[gpu] & _C_COMM) != 0
        for j in np.flatnonzero(comm).tolist():
            r = int(gpu[j])
            self.coll_gpu.append(self._coll(ctx, chunk, r, args[j], start[r], end[r]))
        for j, r in enumerate(rpc.tolist()):
            a = args[ng + nr + j]
            if a is not None and a.collective is not UNSET:
                self.coll_cpu.append(self._coll(ctx, chunk, r, a, start[r], end[r]))

        steps = np.flatnonzero(x & ((name_c & _C_STEP) != 0) & ((cat_c & _C_GPU_ANN) == 0))
        if len(steps):
            self.steps.add(
                number=self.step_no[chunk.name[steps]], start=start[steps], end=end[steps]
            )
        for r in np.flatnonzero(x & ((cat_c & _C_TRACE) != 0)).tolist():
            self.windows.append((int(start[r]), int(end[r]), chunk.first + r))

    def _coll(
        self, ctx: FileContext, chunk: EventChunk, r: int, a: KinetoArgs | None, s: Any, e: Any
    ) -> tuple[Any, ...]:
        name = ctx.name(int(chunk.name[r]))
        info = parse_comm_kernel_name(name)
        kind = info.collective if info is not None else CollectiveKind.UNKNOWN
        dtype = (info.dtype or "") if info is not None else ""
        group, seq, n_in, n_out = UNKNOWN_GROUP, -1, -1, -1
        if a is not None:
            if a.collective is not UNSET and isinstance(a.collective, str):
                named = collective_kind_from_name(a.collective)
                if named != CollectiveKind.UNKNOWN:
                    kind = named
            if isinstance(a.dtype, str):
                dtype = a.dtype
            if a.pg_name is not UNSET:
                group = str(a.pg_name)
                ranks = group_ranks(a.pg_ranks)
                if ranks is not None:
                    self.pg_ranks.setdefault(group, ranks)
            seq, n_in, n_out = as_int(a.seq), as_int(a.in_nelems), as_int(a.out_nelems)
        return (group, kind.label, dtype, n_in, n_out, seq, int(s), int(e), chunk.first + r)

    def finish(self, ctx: FileContext) -> None:
        g = {k: self.gpu.get(k) for k in self.gpu.dtypes}
        r = {k: self.rt.get(k) for k in self.rt.dtypes}
        self._links(ctx, g, r)
        self._window(ctx)
        if self.seen_gpu and self.seen_cpu and not len(self.steps.get("number")):
            ctx.emit(
                "EV605",
                1,
                [
                    Finding(
                        "EV605", "no ProfilerStep#N slice on the CPU side", ctx.at(0, None, None)
                    )
                ],
            )

    def _links(
        self, ctx: FileContext, g: dict[str, npt.NDArray[Any]], r: dict[str, npt.NDArray[Any]]
    ) -> None:
        launch_of = match_launches(
            _pids(ctx, g["thread"]), g["corr"], _pids(ctx, r["thread"]), r["corr"], r["start"]
        )

        def emit(
            code: str, cols: dict[str, npt.NDArray[Any]], rows: npt.NDArray[np.intp], msg: Any
        ) -> None:
            def make(i: int) -> Finding:
                where = ctx.at(int(cols["index"][i]), int(cols["start"][i]), int(cols["thread"][i]))
                return Finding(code, msg(i), where)

            ctx.emit(code, len(rows), (make(i) for i in rows.tolist()))

        gk = g["corr"] >= 0
        no_launch = np.flatnonzero(gk & (launch_of < 0))
        emit(
            "EV601",
            g,
            no_launch,
            lambda i: (
                f"{ctx.name(int(g['name'][i]))!r} (correlation {int(g['corr'][i])}) has no launch"
            ),
        )
        used = np.zeros(len(r["corr"]), dtype=bool)
        used[launch_of[launch_of >= 0]] = True
        no_work = np.flatnonzero((r["corr"] >= 0) & r["launch"] & ~used)
        emit(
            "EV602",
            r,
            no_work,
            lambda i: f"launch with correlation {int(r['corr'][i])} has no GPU event",
        )
        matched = np.flatnonzero(launch_of >= 0)
        early = matched[g["start"][matched] < r["start"][launch_of[matched]]]

        def early_msg(i: int) -> str:
            lead = int(r["start"][launch_of[i]]) - int(g["start"][i])
            corr = int(g["corr"][i])
            return f"starts {format_duration(lead)} before its launch (correlation {corr})"

        emit("EV603", g, early, early_msg)

    def _window(self, ctx: FileContext) -> None:
        """EV604: slices inside none of the Trace spans (an unended B counts as inside)."""
        sl = ctx.slices
        if not self.windows or sl is None or not len(sl.start):
            return
        inside = sl.end == np.iinfo(np.int64).max
        for w0, w1, widx in self.windows:
            inside |= ((sl.start >= w0) & (sl.end <= w1)) | (sl.index == widx)
        out = np.flatnonzero(~inside)
        out = out[np.argsort(sl.index[out], kind="stable")]
        first = min(w[0] for w in self.windows)
        last = max(w[1] for w in self.windows)

        def message(i: int) -> str:
            if sl.start[i] < first:
                return "starts before the Trace span"
            if sl.end[i] > last:
                return f"ends {format_duration(int(sl.end[i]) - last)} after the Trace span"
            return "lies outside every Trace span"

        def finding(i: int) -> Finding:
            where = ctx.at(int(sl.index[i]), int(sl.start[i]), int(sl.thread[i]))
            return Finding("EV604", message(i), where)

        ctx.emit("EV604", len(out), (finding(i) for i in out.tolist()))

    def summary(self, ctx: FileContext) -> RankSummary:
        """The rank's identity, collectives and steps (times on its absolute clock)."""
        steps = (self.steps.get("number"), self.steps.get("start"), self.steps.get("end"))
        colls = self.coll_gpu if self.coll_gpu else self.coll_cpu
        return rank_summary(ctx.path, ctx.facts.top, colls, self.pg_ranks, steps)


def _pids(ctx: FileContext, thread: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """A dense process id per row (the pid as Perfetto sees it)."""
    pid_of = Interner()
    table = np.array(
        [pid_of[ctx.threads.label(t)[0]] for t in range(len(ctx.threads.resolved.keys_))] or [0],
        dtype=np.int64,
    )
    return table[thread] if len(thread) else np.zeros(0, np.int64)


def is_launch_name(name: str) -> bool:
    """Whether a CUDA/HIP API call of this name launches GPU work (kernel, copy or set); host
    functions, symbol copies and peer copies do not produce a correlated GPU row."""
    return bool(_LAUNCH.search(name)) and not _NOT_LAUNCH.search(name)


def match_launches(
    gpu_pid: npt.NDArray[np.int64],
    gpu_corr: npt.NDArray[np.int64],
    rt_pid: npt.NDArray[np.int64],
    rt_corr: npt.NDArray[np.int64],
    rt_start: npt.NDArray[np.int64],
) -> npt.NDArray[np.intp]:
    """For each GPU row, the row of the launch that shares its correlation id (-1: none).

    Correlation ids are unique within one profiled process only, and GPU events sit in device
    processes, not in the CPU process that launched them. Each device process is therefore
    owned by the CPU process that most of its unambiguous correlation ids point to; a GPU row
    then matches only a launch of its owner (this keeps ranks apart in merged files).
    """
    out = np.full(len(gpu_corr), -1, dtype=np.intp)
    valid_rt = np.flatnonzero(rt_corr >= 0)
    if not len(valid_rt) or not len(gpu_corr):
        return out
    order = valid_rt[np.lexsort((rt_start[valid_rt], rt_corr[valid_rt]))]
    keys = rt_corr[order]
    lo = np.searchsorted(keys, gpu_corr, side="left")
    hi = np.searchsorted(keys, gpu_corr, side="right")
    hi[gpu_corr < 0] = lo[gpu_corr < 0]
    single = np.flatnonzero(hi - lo == 1)
    owner = np.full(int(max(gpu_pid.max(), rt_pid.max(initial=0))) + 1, -1, dtype=np.int64)
    if len(single):
        pairs, counts = np.unique(
            np.stack([gpu_pid[single], rt_pid[order[lo[single]]]]), axis=1, return_counts=True
        )
        best: dict[int, int] = {}
        for gp, cp, n in zip(pairs[0].tolist(), pairs[1].tolist(), counts.tolist(), strict=True):
            if n > best.get(gp, 0):
                best[gp], owner[gp] = n, cp
        cand = order[lo[single]]
        want = owner[gpu_pid[single]]
        ok = (want < 0) | (rt_pid[cand] == want)
        out[single[ok]] = cand[ok]
    for i in np.flatnonzero(hi - lo > 1).tolist():
        want_pid = int(owner[gpu_pid[i]])
        for k in range(int(lo[i]), int(hi[i])):
            row = int(order[k])
            if want_pid < 0 or int(rt_pid[row]) == want_pid:
                out[i] = row
                break
    return out


def _correlations(args: list[KinetoArgs | None]) -> npt.NDArray[np.int64]:
    """``args.correlation`` per row (-1 when absent or not an integer)."""
    values = [a.correlation if a is not None else -1 for a in args]
    if set(map(type, values)) <= {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    return np.array([as_int(v) for v in values], dtype=np.int64)
