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


_COLLECTIVE_ALIASES: dict[str, CollectiveKind] = {
    "allreduce": CollectiveKind.ALL_REDUCE,
    "allreduce_coalesced": CollectiveKind.ALL_REDUCE,
    "allgather": CollectiveKind.ALL_GATHER,
    "allgather_into_tensor": CollectiveKind.ALL_GATHER,
    "allgather_into_tensor_coalesced": CollectiveKind.ALL_GATHER,
    "allgather_coalesced": CollectiveKind.ALL_GATHER,
    "_allgather_base": CollectiveKind.ALL_GATHER,
    "reducescatter": CollectiveKind.REDUCE_SCATTER,
    "reduce_scatter_tensor": CollectiveKind.REDUCE_SCATTER,
    "reduce_scatter_tensor_coalesced": CollectiveKind.REDUCE_SCATTER,
    "_reduce_scatter_base": CollectiveKind.REDUCE_SCATTER,
    "alltoall": CollectiveKind.ALL_TO_ALL,
    "alltoallv": CollectiveKind.ALL_TO_ALL,
    "alltoall_base": CollectiveKind.ALL_TO_ALL,
    "broadcast": CollectiveKind.BROADCAST,
    "reduce": CollectiveKind.REDUCE,
    "send": CollectiveKind.SEND,
    "recv": CollectiveKind.RECV,
    "sendrecv": CollectiveKind.SEND_RECV,
    "barrier": CollectiveKind.BARRIER,
    "gather": CollectiveKind.GATHER,
    "scatter": CollectiveKind.SCATTER,
}


def collective_kind_from_name(name: str) -> CollectiveKind:
    """Map a collective name as written by PyTorch or NCCL (``allreduce``, ``AllGather``,
    ``reduce_scatter_tensor``, ``all_to_all``) to a :class:`CollectiveKind`."""
    key = name.strip().lower().removeprefix("nccl:").removeprefix("c10d::")
    key = key.removesuffix("_")
    if key in _COLLECTIVE_ALIASES:
        return _COLLECTIVE_ALIASES[key]
    compact = key.replace("_", "")
    return _COLLECTIVE_ALIASES.get(compact, CollectiveKind.UNKNOWN)
