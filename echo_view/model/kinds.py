"""Enumerations shared by the whole model: event kinds, lane kinds, collective kinds."""

from __future__ import annotations

from enum import IntEnum


class EventKind(IntEnum):
    """What an event is, independent of the source format's category names."""

    CPU_OP = 0
    PYTHON_FUNCTION = 1
    USER_ANNOTATION = 2
    GPU_ANNOTATION = 3
    RUNTIME = 4
    DRIVER = 5
    KERNEL = 6
    MEMCPY = 7
    MEMSET = 8
    SYNC = 9
    INSTANT = 10
    COUNTER = 11
    OTHER = 12

    @property
    def label(self) -> str:
        """Lower-case name used in JSON output and the CLI (``cpu_op``, ``kernel``...)."""
        return self.name.lower()


#: Kinds that execute on a GPU stream.
GPU_KINDS: frozenset[EventKind] = frozenset(
    {EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET, EventKind.GPU_ANNOTATION}
)
#: Kinds that occupy the GPU's execution resources (annotations do not).
GPU_WORK_KINDS: frozenset[EventKind] = frozenset(
    {EventKind.KERNEL, EventKind.MEMCPY, EventKind.MEMSET}
)


class LaneKind(IntEnum):
    """The kind of timeline lane an event lives on."""

    CPU_THREAD = 0
    GPU_STREAM = 1
    OTHER = 2


class CollectiveKind(IntEnum):
    """Communication operations, NCCL's vocabulary."""

    ALL_REDUCE = 0
    ALL_GATHER = 1
    REDUCE_SCATTER = 2
    ALL_TO_ALL = 3
    BROADCAST = 4
    REDUCE = 5
    SEND = 6
    RECV = 7
    SEND_RECV = 8
    BARRIER = 9
    GATHER = 10
    SCATTER = 11
    UNKNOWN = 12

    @property
    def label(self) -> str:
        """Lower-case name (``all_reduce``)."""
        return self.name.lower()
