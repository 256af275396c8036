"""The data model: columnar per-rank :class:`Trace`, the :class:`Job` of all ranks, and the
enumerations and side tables they use. The model knows no file format."""

from echo_view.model.builder import TraceBuilder
from echo_view.model.collectives import collective_kind_from_name
from echo_view.model.comm_kernels import CommKernelInfo, is_comm_kernel, parse_comm_kernel_name
from echo_view.model.event_info import EventFacts, LaunchTable, OpInputTable, SyncTable
from echo_view.model.job import SEPARATE_RUNS, ClockAlignment, Job, JobHead
from echo_view.model.kinds import (
    GPU_KINDS,
    GPU_WORK_KINDS,
    CollectiveKind,
    EventKind,
    LaneKind,
)
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
    "SEPARATE_RUNS",
    "ClockAlignment",
    "CollectiveKind",
    "CollectiveTable",
    "CommKernelInfo",
    "DeviceInfo",
    "EventFacts",
    "EventKind",
    "EventTable",
    "FlowTable",
    "Job",
    "JobHead",
    "Lane",
    "LaneKind",
    "LaunchTable",
    "OpInputTable",
    "ProcessGroup",
    "StepTable",
    "StringTable",
    "SyncTable",
    "Trace",
    "TraceBuilder",
    "collective_kind_from_name",
    "is_comm_kernel",
    "parse_comm_kernel_name",
]
