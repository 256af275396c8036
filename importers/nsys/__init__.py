"""Nsight Systems importer: ``nsys export --type sqlite`` files (also gzip-compressed) and
``.nsys-rep`` reports into a :class:`~echo_view.model.job.Job`.

What is read, how ranks are mapped and which export flags to use: ``docs/nsys.md``.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from echo_view.errors import InputError, InputNote, UsageError
from echo_view.formats import Progress, no_progress
from echo_view.model.job import SEPARATE_RUNS, ClockAlignment, Job
from echo_view.model.kinds import EventKind
from echo_view.model.trace import DeviceInfo, Trace
from importers.folder import folder_files, natural_key, refuse_repeats
from importers.nsys.build import (
    CaptureInfo,
    build_trace,
    lane_index,
    link_launches,
    time_order,
)
from importers.nsys.db import KERNEL_HINT, REPORT_SUFFIXES, Export, file_kind, open_export
from importers.nsys.nccl import find_collectives, nccl_args
from importers.nsys.nvtx import read_nvtx
from importers.nsys.ranks import RANK_BY, plan_ranks
from importers.nsys.sync import read_sync
from importers.nsys.tables import (
    MISSING_NAME,
    Names,
    Rows,
    factorize,
    load_names,
    read_kernels,
    read_memcpy,
    read_memset,
    read_runtime,
)


@dataclass(frozen=True)
class _Clock:
    """What a capture says about its clock: host name, wall-clock anchor, and the span of its
    events on its own clock (first start, last end)."""

    host: str | None
    utc_minus_clock_ns: int | None
    first_ns: int = 0
    last_ns: int = 0


class NsysImporter:
    """Reads Nsight Systems SQLite exports (one capture may hold several ranks; several files
    make one job)."""

    name = "nsys"
    description = "Nsight Systems exports (.nsys-rep, .sqlite, .sqlite.gz)"

    def __init__(self, rank_by: str = "auto") -> None:
        if rank_by not in RANK_BY:
            raise ValueError(f"rank_by must be one of {RANK_BY}, not {rank_by!r}")
        self.rank_by = rank_by

    def sniff(self, path: Path) -> bool:
        """SQLite magic (also inside gzip) or a ``.nsys-rep`` suffix; a directory holding at
        least one such file (one capture per node, say)."""
        path = Path(path)
        if path.is_dir():
            return any(f.is_file() and file_kind(f) is not None for f in sorted(path.iterdir()))
        return path.is_file() and file_kind(path) is not None

    def read(
        self,
        paths: Sequence[Path],
        progress: Progress = no_progress,
        *,
        rank_by: str | None = None,
    ) -> Job:
        """Read the captures in ``paths`` (natural file-name order) into one job; ranks of later
        files follow those of earlier ones. ``rank_by`` (``auto``, ``process``, ``device``)
        overrides the importer's mapping for this call."""
        mode = rank_by or self.rank_by
        if mode not in RANK_BY:
            raise UsageError(f"rank_by must be one of {', '.join(RANK_BY)}, not {mode!r}")
        files, _ = self.rank_files(paths)
        parts = CaptureParts(files, mode)
        for k, path in enumerate(files):
            parts.add(_read_part(path, mode, progress, (k / len(files), (k + 1) / len(files))))
        progress("done", 1.0)
        return parts.finish()

    # -- one file at a time, in any process (echo_view.loading.RankFileReader) -------------

    def rank_files(self, paths: Sequence[Path]) -> tuple[list[Path], bool]:
        """The captures :meth:`read` reads, directories listed, in natural file-name order (a
        capture's ranks are numbered from its processes or devices, never stated: hence
        ``False``)."""
        files: list[Path] = []
        for p in map(Path, paths):
            files.extend(_captures_in(p) if p.is_dir() else [p])
        refuse_repeats(files, "capture")
        return sorted(files, key=natural_key), False

    def read_rank_file(self, path: Path, many: bool) -> CapturePart:
        """One capture read into its ranks, numbered from 0 (:class:`CaptureParts` shifts
        them behind the earlier captures' ranks)."""
        return _read_part(path, self.rank_by, no_progress, (0.0, 1.0))

    def job_parts(self, paths: Sequence[Path], files: Sequence[Path], many: bool) -> CaptureParts:
        """What joins the :meth:`read_rank_file` results of ``files``, in file order."""
        return CaptureParts(files, self.rank_by)


@dataclass(frozen=True, eq=False)
class CapturePart:
    """One capture's ranks (numbered from 0), its clock and the notes reading it left."""

    traces: list[Trace]
    clock: _Clock
    notes: list[str]


class CaptureParts:
    """Joins captures into the job in file order: each capture's ranks follow the earlier
    captures' ranks, wherever the captures were read."""

    def __init__(self, files: Sequence[Path], rank_by: str) -> None:
        self.files = list(files)
        self.rank_by = rank_by
        self.traces: list[Trace] = []
        self.clocks: list[_Clock] = []
        self.per_file: list[int] = []
        self.notes: list[str] = []

    def add(self, part: CapturePart) -> None:
        first = len(self.traces)
        self.traces.extend(_shift_ranks(t, first) for t in part.traces)
        self.clocks.extend([part.clock] * len(part.traces))
        self.per_file.append(len(part.traces))
        self.notes.extend(part.notes)

    def finish(self) -> Job:
        """The job, once every capture is added; the captures' notes become warnings."""
        for note in self.notes:
            warnings.warn(note, InputNote, stacklevel=3)
        return Job(
            traces=tuple(self.traces),
            alignment=_alignment(self.clocks, self.per_file, self.files),
            world_size=None,
            source=", ".join(str(p) for p in self.files),
            meta={"format": "nsys", "rank_by": self.rank_by, "notes": self.notes},
        )


def _read_part(
    path: Path, rank_by: str, progress: Progress, span: tuple[float, float]
) -> CapturePart:
    try:
        traces, clock, notes = _read_capture(path, rank_by, progress, span)
    except (TypeError, ValueError, KeyError, IndexError, OverflowError) as exc:
        # SQLite checks a page's structure, not its values: a damaged export can
        # hold NULLs or out-of-range numbers where the schema promises ids.
        raise InputError(
            f"unexpected content in the export ({type(exc).__name__}: {exc})",
            path=path,
            hint="the file may be damaged; export it again with `nsys export --type "
            "sqlite` (--debug shows where it failed)",
        ) from exc
    return CapturePart(traces, clock, notes)


def _shift_ranks(trace: Trace, first: int) -> Trace:
    """``trace`` with its rank, and the job ranks of its communicators, ``first`` higher."""
    if not first:
        return trace
    groups = tuple(replace(g, ranks=tuple(r + first for r in g.ranks)) for g in trace.groups)
    return replace(trace, rank=trace.rank + first, groups=groups)


def captures_in(folder: Path) -> list[Path]:
    """The captures in ``folder`` (not its sub-folders), by name; a report whose SQLite export
    lies beside it (``nsys export`` writes ``NAME.sqlite`` next to ``NAME.nsys-rep``) is left
    out, so that each capture is read once."""
    # A capture by its name that cannot be read is refused, not skipped (a rank would go).
    folder_files(folder, (".sqlite", ".sqlite.gz", *REPORT_SUFFIXES))
    kinds = {f: file_kind(f) for f in sorted(folder.iterdir()) if f.is_file()}
    found = {f: k for f, k in kinds.items() if k is not None}
    exported = {_stem(f) for f, k in found.items() if k != "report"}
    return [f for f, k in found.items() if k != "report" or _stem(f) not in exported]


def _captures_in(folder: Path) -> list[Path]:
    """:func:`captures_in`, at least one."""
    files = captures_in(folder)
    if not files:
        raise InputError(
            "no Nsight Systems exports in this directory",
            path=folder,
            hint="give .nsys-rep, .sqlite or .sqlite.gz files, or a directory of them",
        )
    return files


def _stem(path: Path) -> str:
    """``NAME`` of ``NAME.nsys-rep``, ``NAME.qdrep``, ``NAME.sqlite`` or ``NAME.sqlite.gz``."""
    name = path.name
    for suffix in (".gz", ".sqlite", *REPORT_SUFFIXES):
        name = name.removesuffix(suffix)
    return name


def _read_capture(
    path: Path, rank_by: str, progress: Progress, span: tuple[float, float]
) -> tuple[list[Trace], _Clock, list[str]]:
    """The capture's ranks, numbered from 0, its clock and its notes."""
    lo, hi = span

    def report(msg: str, f: float) -> None:
        progress(f"{path.name}: {msg}", lo + (hi - lo) * f)

    with open_export(path) as exp:
        report("strings", 0.0)
        names = load_names(exp)
        report("GPU activity", 0.1)
        kernels = read_kernels(exp, names)
        work = [kernels, *(b for b in (read_memcpy(exp, names), read_memset(exp, names)) if b)]
        sync = read_sync(exp, names, work)
        report("CUDA API and NVTX", 0.4)
        runtime = read_runtime(exp, names)
        nvtx = read_nvtx(exp, names)
        report("linking", 0.7)
        n_work = sum(len(b) for b in work)
        cpu = [b for b in (runtime, nvtx.rows) if b is not None]
        rows = Rows.concat([*work, *([sync] if sync else []), *cpu])
        if not len(rows):
            raise InputError(
                "the export holds no GPU activity, CUDA API calls or NVTX events",
                path=path,
                hint=KERNEL_HINT,
            )
        rt_base = n_work + (len(sync) if sync else 0)
        launch_of = (
            link_launches(
                rows.process[:n_work], rows.correlation[:n_work], runtime.process,
                runtime.correlation,
            )
            if runtime is not None
            else np.full(n_work, -1, dtype=np.int64)
        )  # fmt: skip
        linked = np.flatnonzero(launch_of >= 0)
        launch_src, launch_dst = launch_of[linked] + rt_base, linked
        collectives, comms, undecoded = find_collectives(
            exp, names, kernels, launch_of[: len(kernels)], runtime, nvtx
        )
        # Kernel rows come first in ``rows``.
        rows.args = rows.args.replace(
            {c.row: nccl_args(rows.args.get(c.row), c) for c in collectives}
        )
        is_work = np.zeros(len(rows), dtype=bool)
        is_work[:n_work] = True
        plan = plan_ranks(rank_by, rows.process, rows.device, is_work, launch_src, launch_dst)

        unsized = Counter(c.missing for c in collectives if c.nbytes < 0)
        notes = [f"{path}: {w}" for w in exp.warnings]
        if undecoded:
            notes.append(f"{path}: {undecoded} NCCL NVTX payload(s) could not be decoded")
        if names.missing:
            notes.append(
                f"{path}: {names.missing:,} name id(s) have no StringIds row; they read as "
                f"{MISSING_NAME} (the file is damaged or was cut down)"
            )
        meta: dict[str, Any] = {
            "format": "nsys",
            "file": str(path),
            "nsys_version": exp.product_version,
            "schema_version": exp.schema_version,
            "rank_by": plan.mode,
            "capture_ranks": plan.count,
            "nvtx_open_ranges": nvtx.open_ranges,
            "dropped_cpu_events": plan.dropped_cpu_events,
            "source_tables": _source_tables(exp),
        }
        if unsized:
            # Why collectives cannot be timed by a comm model (``simulate --comm model``).
            meta["unsized_collectives"] = "; ".join(
                f"{n} of {len(collectives)} NCCL kernels in {path.name}: {why or 'unknown'}"
                for why, n in unsized.most_common()
            )
        info = CaptureInfo(
            path=str(path),
            names=names,
            process_names=_process_names(exp),
            thread_names=_thread_names(exp, names),
            launch_src=launch_src,
            launch_dst=launch_dst,
            collectives=collectives,
            comms=comms,
            process_ranks=_process_ranks(plan.mode, rows.process[:n_work], plan.rank_of[:n_work]),
        )
        gpus = _gpu_info(exp)
        clock = replace(_clock(exp), first_ns=int(rows.start.min()), last_ns=int(rows.end.max()))
        report("building ranks", 0.8)
        traces: list[Trace] = []
        order = time_order(rows)
        lanes = lane_index(rows)
        rank_of = plan.rank_of[order]
        for r in range(plan.count):
            idx = order[rank_of == r]
            info.metadata = {**meta, **_rank_meta(rows, idx, info)}
            devices = _devices_of(rows, idx, gpus)
            traces.append(build_trace(r, rows, idx, info, devices, lanes))
    return traces, clock, notes


def _source_tables(exp: Export) -> dict[str, str]:
    """The export table each event kind comes from (lets findings name the source row)."""
    runtime, nvtx = "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
    return {
        EventKind.KERNEL.label: exp.kernel_table,
        EventKind.MEMCPY.label: "CUPTI_ACTIVITY_KIND_MEMCPY",
        EventKind.MEMSET.label: "CUPTI_ACTIVITY_KIND_MEMSET",
        EventKind.SYNC.label: "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        EventKind.RUNTIME.label: runtime,
        EventKind.DRIVER.label: runtime,
        EventKind.CPU_OP.label: nvtx,
        EventKind.USER_ANNOTATION.label: nvtx,
        EventKind.INSTANT.label: nvtx,
    }


def _process_ranks(mode: str, process: np.ndarray, rank_of: np.ndarray) -> dict[int, int]:
    """globalPid -> rank in the capture, when each process is one rank (``process`` mode)."""
    if mode != "process":
        return {}
    keep = rank_of >= 0
    procs, inv = factorize(process[keep])
    rank = np.empty(len(procs), dtype=np.int64)
    rank[inv] = rank_of[keep]  # one rank per process in this mode
    return {int(p): int(r) for p, r in zip(procs.tolist(), rank.tolist(), strict=True)}


def _process_names(exp: Export) -> dict[int, str]:
    if not exp.has("PROCESSES") or not {"globalPid", "name"} <= exp.columns("PROCESSES"):
        return {}
    rows = exp.query('SELECT globalPid, name FROM "PROCESSES"', "PROCESSES")
    return {int(g): str(n) for g, n in rows if g is not None and n}


def _thread_names(exp: Export, names: Names) -> dict[int, str]:
    t = "ThreadNames"
    if not exp.has(t) or not {"globalTid", "nameId"} <= exp.columns(t):
        return {}
    # A thread without an id (NULL: the column allows it) names nothing; its row is left out.
    rows = [
        r for r in exp.query(f'SELECT globalTid, nameId FROM "{t}"', t) if isinstance(r[0], int)
    ]
    if not rows:
        return {}
    ids = names.from_ids(np.array([r[1] if r[1] is not None else -1 for r in rows]))
    return {int(r[0]): names[int(g)] for r, g in zip(rows, ids.tolist(), strict=True) if names[g]}


def _rank_meta(rows: Rows, idx: np.ndarray, info: CaptureInfo) -> dict[str, Any]:
    procs = factorize(rows.process[idx])[0].tolist()
    work = idx[rows.kind[idx] == int(EventKind.KERNEL)]
    return {
        "pids": [(p >> 24) & 0xFFFFFF for p in procs],
        "process_names": [info.process_names.get(p, "") for p in procs],
        "gpu_devices": sorted({int(d) for d in np.unique(rows.device[work]).tolist()}),
    }


def _gpu_info(exp: Export) -> dict[int, DeviceInfo]:
    """GPU descriptions by CUDA device index (``TARGET_INFO_GPU``; absent in trimmed exports)."""
    t = "TARGET_INFO_GPU"
    cols = exp.columns(t)
    if not cols or "name" not in cols:
        return {}
    index = "cuDevice" if "cuDevice" in cols else "id"
    c = exp.col
    sql = (
        f"SELECT {c(t, index)}, name, {c(t, 'smCount')}, {c(t, 'totalMemory')}, "
        f'{c(t, "computeMajor")}, {c(t, "computeMinor")} FROM "{t}"'
    )
    out: dict[int, DeviceInfo] = {}
    names = (index, "smCount", "totalMemory", "computeMajor", "computeMinor")
    for k, (idx, name, sms, mem, major, minor) in enumerate(exp.query(sql, t)):
        for col, value in zip(names, (idx, sms, mem, major, minor), strict=True):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(
                    f"{col} is {repr(value)[:40]}, not an integer (row {k + 1})",
                    path=exp.path,
                    where=f"{t}.{col}",
                    hint="the export is damaged; export the report again with nsys",
                )
        cc = (int(major), int(minor)) if major >= 0 and minor >= 0 else None
        out[int(idx)] = DeviceInfo(
            int(idx),
            str(name or ""),
            int(sms) if sms > 0 else None,
            int(mem) if mem > 0 else None,
            cc,
        )
    return out


def _devices_of(rows: Rows, idx: np.ndarray, gpus: dict[int, DeviceInfo]) -> list[DeviceInfo]:
    used = np.unique(rows.device[idx][rows.device[idx] >= 0]).tolist()
    return [gpus[d] for d in used if d in gpus]


def _clock(exp: Export) -> _Clock:
    host = None
    env = "TARGET_INFO_SYSTEM_ENV"
    if {"name", "value"} <= exp.columns(env):
        got = exp.query(f"SELECT value FROM \"{env}\" WHERE name = 'Hostname' LIMIT 1", env)
        host = str(got[0][0]) if got and got[0][0] else None
    host = host or exp.meta.get("EXPORT_HOST")
    anchor = None
    t = "TARGET_INFO_SESSION_START_TIME"
    if {"utcEpochNs", "systemClockNs"} <= exp.columns(t):
        got = exp.query(f'SELECT utcEpochNs, systemClockNs FROM "{t}" LIMIT 1', t)
        # Integers only: another value (text, a float) leaves the capture unanchored, as a
        # missing row does (an anchor is a convenience for aligning several captures).
        if got and all(isinstance(v, int) for v in got[0]):
            anchor = int(got[0][0]) - int(got[0][1])
    return _Clock(host, anchor)


#: How far apart two captures' wall-clock anchors (UTC minus the capture's clock) may be and
#: still be one host clock: NTP slews the wall clock by milliseconds, while another boot or
#: container (hosts that share a name) moves it by the time between them. Also how far apart
#: two captures' wall-clock windows may lie and still be taken as one run (host clocks that
#: disagree by more make one run's captures look like separate runs).
SAME_CLOCK_NS = 1_000_000_000


def _alignment(
    clocks: list[_Clock], per_file: list[int], files: Sequence[Path] = ()
) -> ClockAlignment:
    """How the captures' ranks share one clock: one capture, one host clock, placed by their
    UTC session starts, or neither; captures that did not run at the same time are
    ``separate-runs`` (each keeps its own clock: they are not ranks of one run)."""
    n = len(clocks)
    zeros = (0,) * n
    if n == 1:
        return ClockAlignment("single-rank", zeros, 0)
    if len([k for k in per_file if k]) <= 1:
        return ClockAlignment(
            "shared-host-clock", zeros, 0, "one Nsight Systems capture: one session clock"
        )
    anchors = [c.utc_minus_clock_ns for c in clocks if c.utc_minus_clock_ns is not None]
    anchored = len(anchors) == n
    if anchored:
        apart = _separate_runs(clocks, per_file, files)
        if apart:
            return ClockAlignment(SEPARATE_RUNS, zeros, 0, apart)
    hosts = {c.host for c in clocks}
    one_clock = not anchored or max(anchors) - min(anchors) <= SAME_CLOCK_NS
    if len(hosts) == 1 and None not in hosts and one_clock:
        return ClockAlignment(
            "shared-host-clock", zeros, 0, f"all captures ran on host {next(iter(hosts))}"
        )
    if anchored:
        offsets = tuple(a - anchors[0] for a in anchors)
        return ClockAlignment(
            "wall-clock",
            offsets,
            1_000_000,
            "captures placed by their UTC session start (from different hosts, or from one "
            "host name on different boots); assumes host clocks agree to about 1 ms",
        )
    return ClockAlignment("none", zeros, 0, "captures from different hosts without clock anchors")


def _separate_runs(clocks: list[_Clock], per_file: list[int], files: Sequence[Path]) -> str:
    """Why the captures cannot be ranks of one run (some two of them have no instant in common
    on the wall clock, give or take :data:`SAME_CLOCK_NS`), or ``""``."""
    spans: list[tuple[int, int, str]] = []
    at = 0
    for k, count in enumerate(per_file):
        if not count:
            continue
        c = clocks[at]
        at += count
        utc = c.utc_minus_clock_ns or 0
        name = Path(files[k]).name if k < len(files) else f"capture {k + 1}"
        spans.append((utc + c.first_ns, utc + c.last_ns, name))
    if max(s[0] for s in spans) <= min(s[1] for s in spans) + SAME_CLOCK_NS:
        return ""
    spans.sort()
    runs = "; ".join(f"{name} from {_utc_text(lo)}" for lo, _, name in spans[:4])
    more = f"; and {len(spans) - 4} more" if len(spans) > 4 else ""
    return f"captures of different runs (not running at the same time): {runs}{more}"


def _utc_text(ns: int) -> str:
    """``2026-05-24 13:42:14 UTC`` (or the ns when out of the calendar's range)."""
    try:
        t = datetime.fromtimestamp(ns / 1e9, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ns} ns after the epoch"
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")
