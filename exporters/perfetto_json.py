"""Perfetto / Chrome JSON export (``.json``, ``.json.gz``).

The object form ``{"traceEvents": [...], "baseTimeNanoseconds": B, "metadata": {...}}``:
``ts``/``dur`` are exact microseconds (three decimals) relative to ``B``, the job's earliest
aligned start in absolute ns, so that Perfetto's double-precision times keep every nanosecond
(formats.md §1.2). ``baseTimeNanoseconds`` is Kineto's key for the same base, so a Kineto reader
restores absolute times; Perfetto ignores it, which shifts every event alike. No
``displayTimeUnit``: it is only a display hint for catapult (default ``"ms"``), current Perfetto
ignores it, and older Perfetto builds read ``"ns"`` as "timestamps are in ns", which would shrink
every time a thousandfold; without the key every reader takes ``ts`` as microseconds. Flows are
v1 ``s``/``f`` pairs with ``"bp": "e"`` and file-unique ids, written after all slices so that a
source always precedes its end in the file (Perfetto keeps file order for equal timestamps).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Protocol

import msgspec
import numpy as np

from echo_view.formats import Progress, atomic_output, no_progress
from echo_view.model import DeviceInfo, EventKind, Job
from exporters.jsonrows import (
    CHUNK_ROWS,
    counter_head,
    event_chunks,
    instant_head,
    json_string,
    x_head,
)
from exporters.layout import STEP_CATEGORY, ExportLayout, ExportStats, build_layout

#: gzip level of ``.json.gz``: 3 compresses Kineto JSON ~9x at several times level 6's speed.
GZIP_LEVEL = 3


class Sink(Protocol):
    """A binary stream (a file or a :class:`gzip.GzipFile`)."""

    def write(self, data: bytes, /) -> int: ...


def package_version() -> str:
    """The installed echo-view version (``unknown`` when run from an uninstalled tree)."""
    try:
        return version("echo-view")
    except PackageNotFoundError:
        return "unknown"


def export_metadata(job: Job, layout: ExportLayout) -> dict[str, Any]:
    """The ``metadata`` object: base time, ranks, alignment, layout and flow counts."""
    al = job.alignment
    links = layout.links
    return {
        "generator": "echo-view",
        "echo_view_version": package_version(),
        "base_time_ns": layout.base_ns,
        "time_base": "ts and dur are microseconds after base_time_ns (absolute ns)",
        "ranks": list(job.ranks),
        "world_size": job.world_size,
        "source": job.source,
        "predicted": job.predicted,
        # Per rank, in Kineto's deviceProperties spelling, so that reading back keeps them.
        "devices": {str(t.rank): [_device_properties(d) for d in t.devices] for t in job.traces},
        "alignment": {
            "method": al.method,
            "uncertainty_ns": al.uncertainty_ns,
            "offsets_ns": list(al.offsets_ns),
            "note": al.note,
        },
        "layout": {
            "processes": len(layout.processes),
            "threads": len(layout.threads),
            "slices_moved_to_overlap_lanes": layout.moved,
            "overlap_lanes": layout.extra_lanes,
        },
        "flows": {
            "from_trace": links.from_trace,
            "from_correlation": links.from_correlation,
            "collective": links.collective,
            "skipped": links.skipped,
        },
    }


def _device_properties(d: DeviceInfo) -> dict[str, Any]:
    props: dict[str, Any] = {"id": d.index, "name": d.name}
    if d.sm_count is not None:
        props["numSms"] = d.sm_count
    if d.total_memory_bytes is not None:
        props["totalGlobalMem"] = d.total_memory_bytes
    if d.compute_capability is not None:
        props["computeMajor"], props["computeMinor"] = d.compute_capability
    return props


def _metadata_rows(layout: ExportLayout) -> list[bytes]:
    rows: list[bytes] = []
    for p in layout.processes:
        rows.append(
            b'{"ph":"M","name":"process_name","pid":%d,"args":{"name":%b}}'
            % (p.pid, json_string(p.name))
        )
        rows.append(
            b'{"ph":"M","name":"process_sort_index","pid":%d,"args":{"sort_index":%d}}'
            % (p.pid, p.sort_index)
        )
    for t in layout.threads:
        rows.append(
            b'{"ph":"M","name":"thread_name","pid":%d,"tid":%d,"args":{"name":%b}}'
            % (t.pid, t.tid, json_string(t.name))
        )
        rows.append(
            b'{"ph":"M","name":"thread_sort_index","pid":%d,"tid":%d,"args":{"sort_index":%d}}'
            % (t.pid, t.tid, t.sort_index)
        )
    return rows


def _step_rows(layout: ExportLayout) -> Iterator[bytes]:
    cat = json_string(STEP_CATEGORY)
    for rl in layout.ranks:
        st = rl.trace.steps
        for i in range(len(st)):
            th = layout.threads[int(rl.step_thread[i])]
            ts_us, ts_ns = divmod(int(rl.step_start_ns[i]), 1000)
            d_us, d_ns = divmod(int(rl.step_dur_ns[i]), 1000)
            number = int(st.number[i])
            yield (
                b'{"ph":"X","cat":%b,"name":"step %d","pid":%d,"tid":%d,"ts":%d.%03d,'
                b'"dur":%d.%03d,"args":{"step":%d,"rank":%d,"detected":%b}},\n'
                % (
                    cat,
                    number,
                    th.pid,
                    th.tid,
                    ts_us,
                    ts_ns,
                    d_us,
                    d_ns,
                    number,
                    rl.trace.rank,
                    b"true" if st.detected else b"false",
                )
            )


def _flow_rows(layout: ExportLayout, phase: bytes) -> bytes:
    """All ``s`` (source) or ``f`` (end, ``"bp":"e"``) rows."""
    links = layout.links
    if not len(links):
        return b""
    src = phase == b"s"
    ranks = links.src_rank if src else links.dst_rank
    events = links.src_event if src else links.dst_event
    thread = np.zeros(len(links), dtype=np.int64)
    start = np.zeros(len(links), dtype=np.int64)
    for rl in layout.ranks:
        m = ranks == rl.index
        thread[m] = rl.thread[events[m]]
        start[m] = rl.start_ns[events[m]]
    where = [b'"pid":%d,"tid":%d' % (t.pid, t.tid) for t in layout.threads]
    cats = [b'"cat":%b,"name":%b' % (json_string(c), json_string(c)) for c in links.cats]
    tmpl = b'{"ph":"' + phase + b'",' + (b"" if src else b'"bp":"e",')
    tmpl += b'"id":%d,%b,"ts":%d.%03d,%b},\n'
    us, ns = np.divmod(start, 1000)
    return b"".join(
        tmpl % (i, where[t], a, b, cats[c])
        for i, t, a, b, c in zip(
            links.flow_id.tolist(),
            thread.tolist(),
            us.tolist(),
            ns.tolist(),
            links.cat.tolist(),
            strict=True,
        )
    )


def write_json(
    job: Job,
    layout: ExportLayout,
    out: Sink,
    progress: Progress = no_progress,
    chunk_rows: int = CHUNK_ROWS,
) -> None:
    """Write the whole JSON document for ``job`` laid out as ``layout`` to ``out``."""
    out.write(b'{"traceEvents":[\n')
    total = max(1, layout.event_count())
    done = 0
    kinds = (
        (None, x_head, True),
        (EventKind.INSTANT, instant_head, False),
        (EventKind.COUNTER, counter_head, False),
    )
    for rl in layout.ranks:
        kind = rl.trace.events.kind
        for which, head, with_dur in kinds:
            if which is None:
                rows = np.flatnonzero(rl.is_slice)
            else:
                rows = np.flatnonzero(kind == int(which))
            for n, text in event_chunks(
                rl, rows, layout.threads, head, with_dur=with_dur, chunk_rows=chunk_rows
            ):
                out.write(text)
                progress(f"rank {rl.trace.rank}: writing events", (done + n) / total)
            done += len(rows)
    for row in _step_rows(layout):
        out.write(row)
    progress("writing flows", 1.0)
    out.write(_flow_rows(layout, b"s"))
    out.write(_flow_rows(layout, b"f"))
    meta = _metadata_rows(layout)
    out.write(b",\n".join(meta))
    out.write(b'\n],\n"baseTimeNanoseconds":%d,\n' % layout.base_ns)
    out.write(b'"metadata":%b}\n' % msgspec.json.encode(export_metadata(job, layout)))


class PerfettoJsonExporter:
    """Writes a :class:`Job` as Perfetto-compatible Chrome JSON (gzip for ``.json.gz``)."""

    name: str = "perfetto-json"
    suffixes: tuple[str, ...] = (".json", ".json.gz")

    def __init__(self, *, gzip_level: int = GZIP_LEVEL, chunk_rows: int = CHUNK_ROWS) -> None:
        self.gzip_level = gzip_level
        self.chunk_rows = chunk_rows
        #: Summary of the last :meth:`write` (``None`` before the first).
        self.last_stats: ExportStats | None = None

    def write(self, job: Job, path: Path, progress: Progress = no_progress) -> None:
        """Write ``job`` to ``path`` atomically."""
        path = Path(path)
        layout = build_layout(job)
        with atomic_output(path) as tmp, open(tmp, "wb") as raw:
            if path.name.lower().endswith(".gz"):
                with gzip.GzipFile(
                    filename="", mode="wb", fileobj=raw, compresslevel=self.gzip_level, mtime=0
                ) as gz:
                    write_json(job, layout, gz, progress, self.chunk_rows)
            else:
                write_json(job, layout, raw, progress, self.chunk_rows)
        self.last_stats = layout.stats(layout.event_count(), layout.slice_count())
