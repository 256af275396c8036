"""The data model: columnar per-rank :class:`Trace`, the :class:`Job` of all ranks, and the
enumerations and side tables they use. The model knows no file format."""

from echo_view.model.builder import TraceBuilder
from echo_view.model.collectives import collective_kind_from_name
from echo_view.model.job import ClockAlignment, Job
from echo_view.model.kinds import (
    GPU_KINDS,
    GPU_WORK_KINDS,
    CollectiveKind,
    EventKind,
    LaneKind,
)
from echo_view.model.nccl import NcclKernelInfo, is_nccl_kernel, parse_nccl_kernel_name
from echo_view.model.strings import StringTable
from echo_view.model.trace import (
    NONE,
    CollectiveTable,
    DeviceInfo,
    EventTable,
    FlowTable,
    Lane,
    ProcessGroup,
    StepTable,
    Trace,
)

__all__ = [
    "GPU_KINDS",
    "GPU_WORK_KINDS",
    "NONE",
    "ClockAlignment",
    "CollectiveKind",
    "CollectiveTable",
    "DeviceInfo",
    "EventKind",
    "EventTable",
    "FlowTable",
    "Job",
    "Lane",
    "LaneKind",
    "NcclKernelInfo",
    "ProcessGroup",
    "StepTable",
    "StringTable",
    "Trace",
    "TraceBuilder",
    "collective_kind_from_name",
    "is_nccl_kernel",
    "parse_nccl_kernel_name",
]
