"""Native Perfetto protobuf export (``.pftrace``).

Written as a stream of ``Trace`` messages of one ``TracePacket`` each, all on trusted packet
sequence 1. The ``perfetto`` package's :class:`StreamingTraceProtoBuilder` writes the first
packets: interned names and categories (``SEQ_INCREMENTAL_STATE_CLEARED``), the tracks, and an
instant on an "echo-view export" track that carries the base time, ranks and alignment. The
tracks form a tree with explicit order, which the Perfetto UI keeps (it sorts OS process and
thread tracks by activity instead, ignoring every ordering hint on them): one top-level track per
rank ("rank 0", ...), under it one track per output process of the layout ("CPU (pid 59811)",
"GPU 0", uuid = the JSON export's pid), under those one per output thread (uuid = the JSON
export's tid, same names and lanes) and the counter tracks. Slice begin/end, instant and
counter packets follow, encoded column-wise by :mod:`exporters.packets` in the order of
:mod:`exporters.protoevents`. Times are ns relative to the same base as the JSON export.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

from echo_view.formats import Progress, atomic_output, no_progress
from echo_view.model import Job
from exporters.layout import ExportLayout, ExportStats, build_layout
from exporters.packets import ANNOTATION_NAMES, SEQUENCE_ID, PacketEncoder
from exporters.perfetto_json import package_version
from exporters.protoevents import Counters, counters, intern, packet_order

#: Packets encoded per chunk.
CHUNK_PACKETS = 65_536
#: Name of the track holding the export's metadata instant.
METADATA_TRACK = "echo-view export"


def _packet(builder: StreamingTraceProtoBuilder) -> Any:
    packet = builder.create_packet()
    packet.trusted_packet_sequence_id = SEQUENCE_ID
    return packet


def _write_interned(builder: StreamingTraceProtoBuilder, names: Any, cats: Any) -> None:
    packet = _packet(builder)
    packet.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    data = packet.interned_data
    for iid, name in enumerate(names, start=1):
        data.event_names.add(iid=iid, name=name)
    for iid, name in enumerate(cats, start=1):
        data.event_categories.add(iid=iid, name=name)
    for iid, name in enumerate(ANNOTATION_NAMES, start=1):
        data.debug_annotation_names.add(iid=iid, name=name)
    builder.write_packet(packet)


def rank_roots(layout: ExportLayout, first_uuid: int) -> dict[int, tuple[int, str]]:
    """``{rank: (uuid, name)}`` of the top-level track of each rank, in rank order.

    Names are ``rank N`` with N zero-padded to one width, so that the default (lexicographic)
    order of top-level tracks is the numeric order of the ranks.
    """
    ranks = sorted({p.rank for p in layout.processes})
    width = len(str(max(ranks))) if ranks else 1
    return {r: (first_uuid + i, f"rank {r:0{width}d}") for i, r in enumerate(ranks)}


def _write_tracks(
    builder: StreamingTraceProtoBuilder,
    layout: ExportLayout,
    ctrs: Counters,
    roots: dict[int, tuple[int, str]],
) -> None:
    # Perfetto orders process and thread tracks by their activity and ignores ordering hints
    # on them (UI v52); tracks of its own hierarchy follow child_ordering / sibling_order_rank.
    # So ranks are top-level tracks, their CPU processes and GPUs child tracks in layout order,
    # and threads and streams the children of those.
    for uuid, name in roots.values():
        packet = _packet(builder)
        desc = packet.track_descriptor
        desc.uuid = uuid
        desc.name = name
        desc.child_ordering = pb.TrackDescriptor.EXPLICIT
        builder.write_packet(packet)
    for p in layout.processes:
        packet = _packet(builder)
        desc = packet.track_descriptor
        desc.uuid = p.pid
        desc.parent_uuid = roots[p.rank][0]
        desc.name = p.name.removeprefix(f"rank {p.rank} ")
        desc.child_ordering = pb.TrackDescriptor.EXPLICIT
        desc.sibling_order_rank = p.sort_index
        builder.write_packet(packet)
    for t in layout.threads:
        packet = _packet(builder)
        desc = packet.track_descriptor
        desc.uuid = t.tid
        desc.parent_uuid = t.pid
        desc.name = t.name
        desc.sibling_order_rank = t.sort_index
        builder.write_packet(packet)
    for uuid, pid, name in ctrs.tracks:
        packet = _packet(builder)
        desc = packet.track_descriptor
        desc.uuid = uuid
        desc.parent_uuid = pid
        desc.name = name
        desc.counter.SetInParent()
        builder.write_packet(packet)


def _write_metadata(
    builder: StreamingTraceProtoBuilder, job: Job, layout: ExportLayout, uuid: int
) -> None:
    packet = _packet(builder)
    desc = packet.track_descriptor
    desc.uuid = uuid
    desc.name = METADATA_TRACK
    builder.write_packet(packet)
    packet = _packet(builder)
    packet.timestamp = 0
    event = packet.track_event
    event.type = pb.TrackEvent.TYPE_INSTANT
    event.track_uuid = uuid
    event.name = METADATA_TRACK
    al = job.alignment
    values: dict[str, int | str] = {
        "base_time_ns": layout.base_ns,
        "echo_view_version": package_version(),
        "ranks": ",".join(str(r) for r in job.ranks),
        "world_size": job.world_size if job.world_size is not None else -1,
        "alignment_method": al.method,
        "alignment_uncertainty_ns": al.uncertainty_ns,
        "alignment_offsets_ns": ",".join(str(o) for o in al.offsets_ns),
        "slices_moved_to_overlap_lanes": layout.moved,
        "source": job.source,
    }
    for key, value in values.items():
        ann = event.debug_annotations.add(name=key)
        if isinstance(value, int):
            ann.int_value = value
        else:
            ann.string_value = value
    builder.write_packet(packet)


def write_pftrace(
    job: Job,
    layout: ExportLayout,
    out: IO[bytes],
    progress: Progress = no_progress,
    chunk_packets: int = CHUNK_PACKETS,
) -> tuple[int, int]:
    """Write ``job`` laid out as ``layout`` to ``out``; returns the packets written and the
    counter values left out (no number)."""
    builder = StreamingTraceProtoBuilder(out)
    interned = intern(layout)
    first_free = max([t.tid for t in layout.threads] + [len(layout.processes)]) + 1
    ctrs = counters(layout, first_free)
    meta_uuid = first_free + len(ctrs.tracks)
    _write_interned(builder, interned.names, interned.cats)
    _write_tracks(builder, layout, ctrs, rank_roots(layout, meta_uuid + 1))
    _write_metadata(builder, job, layout, meta_uuid)
    order = packet_order(layout, interned, ctrs)
    encoder = PacketEncoder(layout, interned, ctrs)
    for lo in range(0, len(order), chunk_packets):
        out.write(encoder.encode(order, slice(lo, lo + chunk_packets)))
        progress("writing packets", min(1.0, (lo + chunk_packets) / len(order)))
    return len(order), ctrs.dropped


class PerfettoProtoExporter:
    """Writes a :class:`Job` as a native Perfetto protobuf trace."""

    name: str = "perfetto-proto"
    suffixes: tuple[str, ...] = (".pftrace", ".perfetto-trace")

    def __init__(self, *, chunk_packets: int = CHUNK_PACKETS) -> None:
        self.chunk_packets = chunk_packets
        #: Summary of the last :meth:`write` (``None`` before the first).
        self.last_stats: ExportStats | None = None

    def write(self, job: Job, path: Path, progress: Progress = no_progress) -> None:
        """Write ``job`` to ``path`` atomically."""
        layout = build_layout(job)
        with atomic_output(Path(path)) as tmp, open(tmp, "wb") as fh:
            _, dropped = write_pftrace(job, layout, fh, progress, self.chunk_packets)
        # + 1: the metadata instant.
        stats = layout.stats(layout.event_count(), layout.slice_count() + 1)
        self.last_stats = replace(stats, counter_values_dropped=dropped)
