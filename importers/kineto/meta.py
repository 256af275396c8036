"""Steps, devices, rank and trace metadata of one Kineto file.

- Steps: each ``ProfilerStep#N`` slice on a CPU thread (``user_annotation``, or ``Operator`` in
  2021 traces) is step N from its start to its end; the end of its GPU work is left to
  :mod:`echo_view.analysis.steps`. Nothing is detected here when a trace has no such slices.
- Devices: ``deviceProperties`` (``id``, ``name``, ``numSms``, ``totalGlobalMem``,
  ``computeMajor``/``computeMinor``); fields a vendor leaves out stay unknown.
- Rank: ``distributedInfo.rank``, else the file name (``rank-3``, ``rank3``, ``_rank_3``,
  ``worker3``, ``trainer-3``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from echo_view.model import NONE, DeviceInfo, EventKind, StepTable, StringTable
from importers.kineto.comms import EventView

_STEP = re.compile(r"^ProfilerStep#(\d{1,18})$")  # an int64 step number
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker|trainer)[-_.]?(\d+)(?!\d)", re.IGNORECASE)
_CPU_KINDS = np.array([int(EventKind.CPU_OP), int(EventKind.USER_ANNOTATION)], dtype=np.uint8)


def rank_from_name(path: Path) -> int | None:
    """The rank a file name states (``rank-3.json``, ``worker3_step_12.pt.trace.json.gz``)."""
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def build_steps(ev: EventView, strings: StringTable) -> StepTable:
    """``ProfilerStep#N`` slices as steps (``gpu_end_ns`` unknown)."""
    step_names: dict[int, int] = {}
    for sid, text in enumerate(strings.strings):
        m = _STEP.match(text)
        if m:
            step_names[sid] = int(m.group(1))
    if not step_names:
        return StepTable.empty()
    rows = np.flatnonzero(
        np.isin(ev.name, np.array(list(step_names), dtype=np.int32)) & np.isin(ev.kind, _CPU_KINDS)
    )
    seen: set[int] = set()
    keep: list[int] = []
    for r in rows[np.argsort(ev.start_ns[rows], kind="stable")].tolist():
        number = step_names[int(ev.name[r])]
        if number not in seen:  # a step profiled twice keeps its first slice
            seen.add(number)
            keep.append(r)
    if not keep:
        return StepTable.empty()
    sel = np.array(keep, dtype=np.int64)
    start = ev.start_ns[sel]
    return StepTable(
        number=np.array([step_names[int(ev.name[r])] for r in keep], dtype=np.int64),
        start_ns=start,
        end_ns=start + ev.dur_ns[sel],
        # Left to the analysis (echo_view.analysis.steps), the one place for the rule.
        gpu_end_ns=np.full(len(sel), NONE, dtype=np.int64),
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def build_devices(props: object) -> tuple[DeviceInfo, ...]:
    """``deviceProperties`` as :class:`DeviceInfo` (entries without an ``id`` are skipped)."""
    out: list[DeviceInfo] = []
    for i, p in enumerate(props if isinstance(props, list) else []):
        if not isinstance(p, dict):
            continue
        index = _int(p.get("id"))
        major, minor = _int(p.get("computeMajor")), _int(p.get("computeMinor"))
        name = p.get("name")
        out.append(
            DeviceInfo(
                index=index if index is not None else i,
                name=name if isinstance(name, str) else "",
                sm_count=_int(p.get("numSms")),
                total_memory_bytes=_int(p.get("totalGlobalMem")),
                compute_capability=(major, minor)
                if major is not None and minor is not None
                else None,
            )
        )
    return tuple(out)


#: Top-level keys copied into ``Trace.metadata`` under their own names.
_COPIED = (
    "traceName",
    "displayTimeUnit",
    "cupti_version",
    "cuda_runtime_version",
    "cuda_driver_version",
    "roctracer_version",
    "hip_runtime_version",
    "hip_driver_version",
    "record_shapes",
    "profile_memory",
    "with_stack",
    "with_flops",
    "with_modules",
    "trace_id",
    "host_name",
)


def trace_metadata(top: dict[str, Any], source_format: str) -> dict[str, Any]:
    """``Trace.metadata`` from a file's top-level keys."""
    dist = top.get("distributedInfo")
    dist = dist if isinstance(dist, dict) else {}
    meta: dict[str, Any] = {"source_format": source_format}
    for key, value in (
        ("world_size", _int(dist.get("world_size"))),
        ("backend", dist.get("backend")),
        ("nccl_version", dist.get("nccl_version")),
        ("pg_count", _int(dist.get("pg_count"))),
        ("schema_version", top.get("schemaVersion")),
        ("base_time_ns", _int(top.get("baseTimeNanoseconds"))),
    ):
        if value is not None:
            meta[key] = value
    for key in _COPIED:
        if key in top and isinstance(top[key], (str, int, float, bool)):
            meta[key] = top[key]
    return meta
