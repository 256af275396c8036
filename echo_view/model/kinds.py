"""Enumerations shared by the whole model: event kinds, lane kinds, and (from
:mod:`echo_view.model.collectives`, where each kind is defined beside its properties)
collective kinds."""

from __future__ import annotations

from enum import IntEnum

# Collective kinds are defined beside their properties (adding one touches one file).
from echo_view.model.collectives import CollectiveKind


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


__all__ = ["GPU_KINDS", "GPU_WORK_KINDS", "CollectiveKind", "EventKind", "LaneKind"]
