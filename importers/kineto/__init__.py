"""PyTorch profiler (Kineto) traces -> a :class:`~echo_view.model.Job`, one file per rank.

``KinetoImporter().read(paths)`` takes one file, several files, or directories of rank files
(``.json`` or ``.json.gz``, gzip recognised by content) and returns one job:

- Events: every ``X`` slice, ``B``/``E`` and ``b``/``e`` pair, instant and counter, with exact
  int64 ns times (``baseTimeNanoseconds`` added; see :mod:`importers.kineto.columns`), kinds from
  Kineto's categories (2021 ``Kernel``/``Runtime``/``Operator`` ones too), lanes per GPU stream
  and CPU thread, ``correlation`` and ``External id`` columns, and each event's raw ``args``
  (:mod:`importers.kineto.timeline`). Rows are in file order. What the core reads from the args
  (launch configurations, operator inputs, sync records) is typed by :mod:`importers.event_args`.
- Flows (``ac2g``, ``async_cpu_to_gpu``, ``async``, ``fwdbwd``... ``s``/``f`` pairs) as arrows
  between event rows; collectives and process groups (:mod:`importers.kineto.comms`);
  ``ProfilerStep#N`` steps, devices and metadata (:mod:`importers.kineto.meta`).
- Ranks: ``distributedInfo.rank``, else the file name (``rank-3``, ``rank3``, ``_rank_3``,
  ``worker3``). A single file that states no rank is rank 0 (``metadata["rank_source"]`` says
  so); when several files are read, each must state its rank, and two files may not claim one.
- Clocks: :mod:`importers.kineto.align` (``Job.alignment`` says how and how well).
- Any other trace-event JSON (a plain Chrome trace, an echo-view export) is read by the same
  rules; an echo-view export is split back into its ranks (:mod:`importers.kineto.roundtrip`).
"""

from __future__ import annotations

import ctypes
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from echo_view.errors import InputError, InputNote
from echo_view.model import ClockAlignment, EventTable, Job, JobHead, StringTable, Trace
from echo_view.model.job import rank_problem
from echo_view.text import clipped, printable
from importers.chrome_json import (
    DEFAULT_CHUNK_BYTES,
    looks_like_trace,
    read_container,
    sniff_head,
)
from importers.chrome_json_text import GZIP_MAGIC
from importers.event_args import event_facts
from importers.folder import folder_files, refuse_repeats
from importers.kineto.align import ClockFacts, align_ranks, clock_facts
from importers.kineto.columns import Columns, IntEvent, NumberEvent, RawEvent, check_args_text
from importers.kineto.comms import EventView, build_collectives
from importers.kineto.meta import build_devices, build_steps, rank_from_name, trace_metadata
from importers.kineto.roundtrip import export_metadata, split_export
from importers.kineto.rows import FileColumns
from importers.kineto.timeline import build_timeline

if TYPE_CHECKING:
    from echo_view.formats import Progress


def no_progress(message: str, fraction: float) -> None:
    """Report nothing (echo_view.formats has the same; not imported at run time because it
    loads importlib.metadata, ~3 MB of peak RSS for a library call that needs none of it)."""


def _heap_trimmer() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None
    return trim


_TRIM = _heap_trimmer()


def trim_heap() -> None:
    """Give the C heap's free pages back to the OS.

    The chunk buffers and per-chunk column pieces leave holes in glibc's heap that it keeps;
    the next stage's arrays (concatenated columns, the timeline) then land above them. Returning
    the holes between stages took 6-10 MB off the peak RSS of a 54 MB trace (see
    docs/performance.md) for about a millisecond. A no-op where malloc_trim does not exist.
    """
    if _TRIM is not None:
        _TRIM(0)


_SUFFIXES = (".json", ".json.gz", ".gz")
_KINETO_KEYS = (b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"')
_NAME_HINT = (
    "name each file after its rank (rank-3.json, worker3.pt.trace.json.gz) or profile with "
    "torch.distributed initialised so that distributedInfo.rank is recorded; files of several "
    "profiling cycles of one process are not ranks: give one of them"
)


@dataclass
class ParsedFile:
    """One file read into columns, with its top-level keys and container facts."""

    path: Path
    columns: FileColumns
    top: dict[str, Any]
    form: str
    truncated: bool
    dropped_bytes: int
    text_bytes: int


def read_file(
    path: Path,
    progress: Progress = no_progress,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    done: float = 0.0,
    share: float = 1.0,
) -> ParsedFile:
    """Read one trace-event file into columns (progress from ``done`` to ``done + share``)."""
    cols = Columns()
    decoding: type[RawEvent] = IntEvent
    with read_container(path, chunk_bytes=chunk_bytes) as c:
        for chunk in c.chunks(IntEvent, fallback=NumberEvent):
            cols.add(chunk)
            if cols.event_type is not decoding:  # fractional µs: as doubles, or ts as text
                decoding = cols.event_type
                c.decode_next_as(decoding, fallback=RawEvent)
            chunk.release()
            progress(f"{path.name}: {c.event_count} events", done + share * c.fraction_read())
            del chunk
        if c.event_count == 0:
            raise InputError(
                "the trace holds no events",
                path=path,
                where="traceEvents",
                hint="check that the profiler recorded anything",
            )
        trim_heap()
        columns = cols.finish()
        if not len(columns.phase):  # only metadata, flows or unmatched ends: nothing to show
            raise InputError(
                f"the trace holds no slices, instants or counters ({c.event_count:,} events, "
                "all metadata, flow or unmatched end records)",
                path=path,
                where="traceEvents",
                hint="check that the profiler recorded anything",
            )
        check_args_text(columns.args_blob, columns.args_offsets, columns.index, path)
        trim_heap()
        return ParsedFile(path, columns, c.top, c.form, c.truncated, c.dropped_bytes, c.text_bytes)


def source_format(top: dict[str, Any]) -> str:
    """``echo-view`` (our export), ``kineto`` or ``chrome-json``."""
    if export_metadata(top) is not None:
        return "echo-view"
    kineto = ("schemaVersion", "distributedInfo", "deviceProperties", "baseTimeNanoseconds")
    return "kineto" if any(k in top for k in kineto) else "chrome-json"


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def build_trace(parsed: ParsedFile, fc: FileColumns, rank: int, extra: dict[str, Any]) -> Trace:
    """One rank's :class:`Trace` from its columns."""
    top = parsed.top
    tl = build_timeline(fc)
    # Flow binding's freed temporaries would stay resident under what collectives and steps
    # allocate next: -0.9 MB peak on the 53.7 MB sample (docs/performance.md).
    trim_heap()
    base = top.get("baseTimeNanoseconds")
    base = base if isinstance(base, int) and not isinstance(base, bool) else 0
    start = tl.start_ns
    if base and len(start):
        lo, hi = int(start.min()), int(start.max()) + int(tl.dur_ns.max())
        fits = _INT64_MIN <= base <= _INT64_MAX
        if not (fits and lo + base >= _INT64_MIN and hi + base <= _INT64_MAX):
            raise InputError(
                f"baseTimeNanoseconds {base} puts event times beyond 64-bit nanoseconds",
                path=parsed.path,
                where="baseTimeNanoseconds",
                hint="the value should be the profiler's start time in ns since the epoch",
            )
        # In place when the column is ours (the file's columns are not used after this): a
        # second start column would be held at the importer's peak.
        if start.flags.writeable and start.base is None:
            start += np.int64(base)
        else:
            start = start + np.int64(base)
    strings = StringTable(fc.strings)
    view = EventView(
        kind=tl.kind,
        name=fc.name,
        lane=tl.lane,
        start_ns=start,
        dur_ns=tl.dur_ns,
        correlation=fc.correlation,
        external_id=fc.external_id,
        args_blob=fc.args_blob,
        args_offsets=fc.args_offsets,
    )
    dist = top.get("distributedInfo")
    pg_config = dist.get("pg_config") if isinstance(dist, dict) else None
    comms = build_collectives(view, strings, pg_config)
    steps = extra.pop("steps", None) or build_steps(view, strings)
    # An echo-view export carries each rank's devices in its metadata, in Kineto's spelling.
    device_props = extra.pop("device_properties", None) or top.get("deviceProperties")
    meta = trace_metadata(top, source_format(top))
    meta.update(extra)
    notes = {**tl.notes, **comms.notes}
    if fc.skipped:
        notes["events_skipped_by_phase"] = sum(fc.skipped.values())
        meta["skipped_phases"] = dict(fc.skipped)
    if parsed.truncated:
        meta["truncated"] = True
        notes["dropped_bytes"] = parsed.dropped_bytes
    meta["import_notes"] = notes
    meta["process_names"] = tl.process_names
    for column in (tl.kind, start, tl.dur_ns, fc.name, fc.cat, tl.lane, fc.correlation,
                   fc.external_id, fc.args_offsets):  # fmt: skip
        column.flags.writeable = False  # the model then keeps them without a copy
    events = EventTable(
        kind=tl.kind,
        start_ns=start,
        dur_ns=tl.dur_ns,
        name=fc.name,
        cat=fc.cat,
        lane=tl.lane,
        correlation=fc.correlation,
        external_id=fc.external_id,
        args_blob=fc.args_blob,
        args_offsets=fc.args_offsets,
    )
    return Trace(
        rank=rank,
        source=str(parsed.path),
        strings=strings,
        events=events,
        lanes=tl.lanes,
        flows=tl.flows,
        collectives=comms.table,
        groups=comms.groups,
        steps=steps,
        devices=build_devices(device_props),
        metadata=meta,
        facts=event_facts(events),
    )


def _file_rank(parsed: ParsedFile, many: bool) -> tuple[int, str]:
    dist = parsed.top.get("distributedInfo")
    rank = dist.get("rank") if isinstance(dist, dict) else None
    ws = dist.get("world_size") if isinstance(dist, dict) else None
    problem = rank_problem(rank, ws)
    if problem is not None:
        raise InputError(
            problem,
            path=parsed.path,
            where="distributedInfo",
            hint="the rank identity is damaged; fix or remove distributedInfo.rank/world_size",
        )
    if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
        return rank, "distributedInfo"
    named = rank_from_name(parsed.path)
    if named is not None:
        return named, "file name"
    if many:
        raise InputError(
            "cannot tell which rank this file is: it has no distributedInfo.rank and its "
            "name states no rank",
            path=parsed.path,
            hint=_NAME_HINT,
        )
    return 0, "default (a single file that states no rank)"


def expand(paths: Sequence[Path]) -> tuple[list[Path], bool]:
    """The trace files of ``paths`` (directories listed) and whether ranks must be explicit:
    with two files or more (one file, also alone in a directory, is rank 0 unless it says)."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = []
            for f in folder_files(p, _SUFFIXES):
                head = sniff_head(f)
                if looks_like_trace(head):
                    found.append(f)
                elif f.name.lower().endswith(".gz") and _damaged_gzip(f, head):
                    raise InputError(
                        "empty or damaged gzip data: cannot read its start",
                        path=f,
                        hint="copy the rank file again, or move it out of the folder",
                    )
            if not found:
                raise InputError(
                    "no trace files (.json or .json.gz holding trace events) in this directory",
                    path=p,
                    hint="point at the directory that holds the rank files",
                )
            files.extend(found)
        elif p.exists():
            files.append(p)
        else:
            raise InputError("no such file or directory", path=p, hint="check the path")
    if not files:
        raise InputError("no input files given", hint="give trace files or a directory")
    refuse_repeats(files, "rank file")
    return files, len(files) > 1


def _damaged_gzip(path: Path, head: bytes) -> bool:
    """Whether a ``.gz`` file of a job folder does not start as gzip data that decompresses
    (``head``: :func:`sniff_head` of it): a damaged rank file, not some other file."""
    with open(path, "rb") as fh:
        return fh.read(2) != GZIP_MAGIC or not head


class KinetoImporter:
    """Reads Kineto (PyTorch profiler) and other trace-event JSON files into a :class:`Job`."""

    name = "kineto"
    description = "Kineto/Chrome JSON traces (.json, .json.gz)"

    def __init__(self, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self.chunk_bytes = chunk_bytes

    def sniff(self, path: Path) -> bool:
        """True for a trace-event JSON file, or a directory holding at least one."""
        path = Path(path)
        if path.is_dir():
            return any(
                f.is_file() and f.name.lower().endswith(_SUFFIXES) and self._sniff_file(f)
                for f in sorted(path.iterdir())
            )
        return path.is_file() and self._sniff_file(path)

    @staticmethod
    def _sniff_file(path: Path) -> bool:
        head = sniff_head(path)
        if looks_like_trace(head):
            return True
        text = head.lstrip()
        return text.startswith(b"{") and any(k in head for k in _KINETO_KEYS)

    def read(self, paths: Sequence[Path], progress: Progress = no_progress) -> Job:
        """Read the files of one job (see the module docstring for the rules)."""
        files, many = self.rank_files(paths)
        job = JobParts(paths, files, many)
        for i, path in enumerate(files):
            part = read_part(
                path, many, progress, chunk_bytes=self.chunk_bytes, done=i / len(files),
                share=1 / len(files),
            )  # fmt: skip
            progress(f"{path.name}: building the timeline", (i + 1) / len(files))
            job.add(part)
            del part
        return job.finish()

    def rank_files(self, paths: Sequence[Path]) -> tuple[list[Path], bool]:
        """The files :meth:`read` reads (directories listed) and whether each must state its
        rank: one :meth:`read_rank_file` each, joined by :class:`JobParts` in this order."""
        return expand(paths)

    def read_rank_file(self, path: Path, many: bool) -> FilePart:
        """One of :meth:`rank_files` read into its traces (in any process)."""
        return read_part(path, many, chunk_bytes=self.chunk_bytes)

    def job_parts(self, paths: Sequence[Path], files: Sequence[Path], many: bool) -> JobParts:
        """What joins the :meth:`read_rank_file` results of ``files`` into the job."""
        return JobParts(paths, files, many)

    def digest_part(self, part: FilePart, digest: Callable[[Trace], Any]) -> FilePart:
        """``part`` with each trace replaced by its :class:`RankDigest` (``digest`` of it and
        what joining needs), so that the events can go: :meth:`JobParts.finish_digests`."""
        digests = [
            RankDigest(t.rank, t.world_size, len(t), clock_facts(t), digest(t)) for t in part.traces
        ]
        return FilePart(part.path, [], part.alignment, part.meta, digests, part.notes)


@dataclass(frozen=True, eq=False)
class RankDigest:
    """One rank's trace without its events: what joining it needs (rank, world size, event
    count, clock facts) and the caller's per-rank ``result``."""

    rank: int
    world_size: int | None
    events: int
    clock: ClockFacts
    result: Any


@dataclass
class FilePart:
    """One file's traces (one per rank it holds), built where the file was read."""

    path: Path
    traces: list[Trace]
    #: An echo-view export's own clock alignment and job metadata, restored.
    alignment: ClockAlignment | None = None
    meta: dict[str, object] = field(default_factory=dict)
    #: The traces as :class:`RankDigest` instead (:meth:`KinetoImporter.digest_part`).
    digests: list[RankDigest] = field(default_factory=list)
    #: What reading the file repaired or dropped (:func:`repair_notes`), warned by the client.
    notes: list[str] = field(default_factory=list)


#: Import notes that change what the results count, in words (the others, such as flow ends
#: whose start a sampled trace left out, are routine and stay in the trace's metadata).
_REPAIRS = {
    "negative_durations_set_to_zero": "slice(s) of negative duration read as 0 long (Perfetto "
    "drops them)",
    "unmatched_end_events": "end event(s) (E, e) without a begin, dropped",
    "unclosed_begin_events": "begin event(s) (B, b) never ended, read as 0 long",
}


#: The Trace Event Format's phases (Google's "Trace Event Format" document), and the empty
#: ``{}`` that closes many array-form traces: events of the others, or without a phase, are
#: skipped by every reader (Perfetto too) and noted.
_FORMAT_PHASES = frozenset([*"BEXiICbnestfSTpFPONDMRVvc()", "(empty)"])


def repair_notes(path: Path, parsed: ParsedFile, traces: Sequence[Trace]) -> list[str]:
    """One line per repair reading ``path`` made: an array form cut inside an event (without
    its ``]``, which the format lets a tracer leave out, but with a half-written last event),
    and the counts of :data:`_REPAIRS` over its traces."""
    notes = []
    if parsed.truncated and parsed.dropped_bytes:
        notes.append(
            f"{path}: the event array ends inside an event (a trace cut short): "
            f"{parsed.dropped_bytes:,} bytes of a half-written last event dropped"
        )
    for key, words in _REPAIRS.items():
        count = sum(int(t.metadata.get("import_notes", {}).get(key, 0)) for t in traces)
        if count:
            notes.append(f"{path}: {count:,} {words}")
    odd: Counter[str] = Counter()
    for t in traces:
        for ph, n in t.metadata.get("skipped_phases", {}).items():
            if ph not in _FORMAT_PHASES:
                odd[ph] += int(n)
    if odd:  # (phases of the format that echo-view does not read are routine)
        shown = ", ".join(f"{printable(clipped(ph))} ×{n:,}" for ph, n in odd.most_common(3))
        notes.append(
            f'{path}: {sum(odd.values()):,} event(s) with no or an unknown phase ("ph") '
            f"skipped ({shown}); `echo-view check` lists them"
        )
    system = parsed.top.get("systemTraceEvents")
    if system:  # Chrome's ftrace text beside the events: Perfetto shows it, echo-view does not
        notes.append(
            f"{path}: systemTraceEvents (system trace text, {len(str(system)):,} characters) "
            "not read: echo-view reads traceEvents only, and an export leaves it out"
        )
    return notes


def read_part(
    path: Path,
    many: bool,
    progress: Progress = no_progress,
    *,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    done: float = 0.0,
    share: float = 1.0,
) -> FilePart:
    """Read one rank file into its traces (an echo-view export may hold several ranks)."""
    parsed = read_file(path, progress, chunk_bytes=chunk_bytes, done=done, share=share)
    exported = split_export(parsed)
    if exported is not None:
        part = FilePart(path, [], exported.alignment, dict(exported.job_meta))
        pieces = exported.pieces
    else:
        rank, how = _file_rank(parsed, many)
        part = FilePart(path, [])
        pieces = [(rank, parsed.columns, {"rank_source": how})]
    for rank, fc, extra in pieces:
        part.traces.append(build_trace(parsed, fc, rank, extra))
    part.notes = repair_notes(path, parsed, part.traces)
    return part


class JobParts:
    """Joins files' :class:`FilePart` into the :class:`Job`, added in file order: the same
    checks (each rank once, one world size) and results however the parts were read."""

    def __init__(self, paths: Sequence[Path], files: Sequence[Path], many: bool) -> None:
        self.paths = list(paths)
        self.files = list(files)
        self.many = many
        self.traces: list[Trace] = []
        self.digests: list[RankDigest] = []
        self.key_ids: dict[object, int] = {}
        self.owner: dict[int, Path] = {}
        self.world: dict[int, Path] = {}
        self.restored: ClockAlignment | None = None
        self.meta: dict[str, object] = {}
        self.notes: list[str] = []

    def add(self, part: FilePart) -> None:
        """Take the next file's traces or digests (raises when a rank is claimed twice)."""
        if part.alignment is not None:
            self.restored = part.alignment
        self.meta.update(part.meta)
        self.notes += part.notes
        claims = [(t.rank, t.world_size) for t in part.traces]
        claims += [(d.rank, d.world_size) for d in part.digests]
        for rank, ws in claims:
            if rank in self.owner:
                raise InputError(
                    f"two files claim rank {rank}: {self.owner[rank]} and {part.path}",
                    path=part.path,
                    hint="read the files of one job only, each rank once",
                )
            self.owner[rank] = part.path
            if ws is not None:
                self.world.setdefault(ws, part.path)
        self.traces.extend(part.traces)
        # Collective keys held once for the job, not once per rank.
        self.digests.extend(
            RankDigest(d.rank, d.world_size, d.events, d.clock.interned(self.key_ids), d.result)
            for d in part.digests
        )

    def finish(self) -> Job:
        """The job (ranks sorted, clocks aligned)."""
        traces = sorted(self.traces, key=lambda t: t.rank)
        ranks, events = [t.rank for t in traces], sum(len(t) for t in traces)
        head = self._head(ranks, lambda: [clock_facts(t) for t in traces], events)
        return Job(
            traces=tuple(traces),
            alignment=head.alignment,
            world_size=head.world_size,
            source=head.source,
            predicted=head.predicted,
            meta=head.meta,
        )

    def finish_digests(self) -> tuple[JobHead, list[Any]]:
        """The job's head and the digests' results, by rank, as :meth:`finish` would give
        (joined from :class:`RankDigest` parts only)."""
        digests = sorted(self.digests, key=lambda d: d.rank)
        events = sum(d.events for d in digests)
        head = self._head([d.rank for d in digests], lambda: [d.clock for d in digests], events)
        return head, [d.result for d in digests]

    def _head(
        self, ranks: list[int], clocks: Callable[[], list[ClockFacts]], events: int
    ) -> JobHead:
        """Checks across files, the clock alignment and the job's metadata; the files'
        repairs warned (:class:`~echo_view.errors.InputNote`), here where they are joined,
        however they were read."""
        for note in self.notes:
            warnings.warn(note, InputNote, stacklevel=3)
        world, files, paths = self.world, self.files, self.paths
        if len(world) > 1:
            (a, pa), (b, pb) = list(world.items())[:2]
            raise InputError(
                f"the files come from different jobs: {pa} has world size {a}, {pb} has {b}",
                path=pb,
                hint="read the rank files of one job together",
            )
        restored = self.restored
        alignment = restored if restored is not None and len(files) == 1 else align_ranks(clocks())
        one_dir = len(paths) == 1 and Path(paths[0]).is_dir()
        source = str(files[0].parent if one_dir else files[0])
        meta = dict(self.meta)
        return JobHead(
            ranks=tuple(ranks),
            alignment=alignment,
            world_size=next(iter(world), None),
            source=source if len(paths) == 1 else ", ".join(str(p) for p in paths),
            predicted=bool(meta.pop("predicted", False)),
            events=events,
            meta=meta,
        )
