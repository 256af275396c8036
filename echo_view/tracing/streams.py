"""The GPU streams of a traced training step and the waits between them.

PyTorch's distributed code overlaps communication with compute through streams and events.
FSDP2 (``torch.distributed.fsdp.fully_shard``) copies a unit's parameters into its
all-gather input on an all-gather copy-in stream, all-gathers from an all-gather stream, and
divides and reduce-scatters gradients from a reduce-scatter stream, each ordered against the
compute stream with ``wait_stream`` / ``record_event`` / ``wait_event``
(``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``, ``FSDPCommContext``;
``_fsdp_collectives.py``, ``foreach_all_gather`` and ``foreach_reduce``). In forward the
next unit's all-gather overlaps the current unit's compute because it is issued on its own
stream (implicit prefetching, PyTorch's "FSDP Notes", "FSDP Prefetch Nuances"); in backward
the next unit is prefetched in reverse post-forward order (pytorch/pytorch#128884). Traced on
the CPU, that code talks to ``torch.cpu``'s stand-in ``Stream`` and ``Event``, which do
nothing; :func:`cpu_streams` replaces them while a step is traced with ones that tell a
:class:`StreamRecorder` which stream each op is issued on and what each stream waits for.
(FSDP2 then takes the path it takes on a GPU: a stream's ``record_event`` returns an event.)

Collectives run as ``ProcessGroupNCCL`` runs them (``torch/csrc/distributed/c10d/
ProcessGroupNCCL.hpp``: each NCCL call runs on a stream other than the current one, which must
wait for it through the work's ``wait``): on the communication stream of their process group
(one per group; collectives of one group run one after another in issue order), after
everything issued before on the stream that launches them. The launching stream then waits for
the collective's end when it is waited for: at once for a synchronous collective
(``async_op=False``: the work's ``wait`` is called before the call returns); for a functional
collective (DTensor) where ``wait_tensor`` reaches the dispatcher; and for an asynchronous one
whose work is waited in C++ (DDP's gradient buckets, waited by its reducer when the backward
pass ends) by the compute stream at the end of the backward pass, or before, by the stream of
the first op that touches its tensors (DDP's reducer waits for each bucket before it copies
the bucket back into the gradients, ``Reducer::finalize_backward``): a program that read a
buffer a collective is still writing would be racing it.

A wait is recorded as a row of its own on the waiting stream (the graph's ``wait`` column),
so an op may wait for several streams and a wait may refer to a row of an earlier phase.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten

from echo_view.model.graph import OpClass, OpTable
from echo_view.model.strings import StringTable
from echo_view.tracing.recorder import (
    C10D_NAMESPACES,
    C10D_NO_KERNEL,
    Recorder,
    group_ranks,
    storage_of,
)

#: Name of a wait row (what a Kineto trace shows for it).
WAIT_NAME = "cudaStreamWaitEvent"
#: Streams a graph can hold (the ``stream`` column is int8).
MAX_STREAMS = 127


class TooManyStreams(RuntimeError):
    """The step used more streams than a graph holds."""


class StreamRecorder(Recorder):  # type: ignore[no-untyped-call]
    """A :class:`Recorder` that records each op's stream and the waits between streams
    (module docstring). Rows are numbered step-wide (:attr:`offset` counts the rows of the
    phases already ended)."""

    def __init__(self, strings: StringTable) -> None:
        super().__init__(strings)
        self.offset = 0
        self.streams = 1  # stream 0: the default (compute) stream
        #: Step-wide row of the last op on each stream.
        self.last: dict[int, int] = {}
        #: Latest row of stream ``src`` that stream ``dst`` already waits for.
        self._waited: dict[tuple[int, int], int] = {}
        self._group_streams: dict[tuple[int, ...], int] = {}
        #: Asynchronous collectives not waited for yet: communication stream -> last row.
        self.unwaited: dict[int, int] = {}
        #: Storages of those collectives' tensors -> (communication stream, row).
        self._in_flight: dict[StorageWeakRef, tuple[int, int]] = {}
        #: Functional collectives' outputs not waited for yet: id(tensor) -> (stream, row).
        self._functional: dict[int, tuple[int, int]] = {}
        self._stream_now: Any = None  # torch.cpu.current_stream while traced
        self._placed: int | None = None  # the stream the next row goes to, when not current

    # -- streams -------------------------------------------------------------------------
    def new_stream(self) -> int:
        """The number of a stream the step creates."""
        if self.streams > MAX_STREAMS:
            raise TooManyStreams(f"more than {MAX_STREAMS} streams")
        self.streams += 1
        return self.streams - 1

    def current(self) -> int:
        """The stream ops are issued on now."""
        return int(getattr(self._stream_now(), "number", 0)) if self._stream_now else 0

    def wait(self, stream: int, src: int, row: int) -> None:
        """Make ``stream`` wait for the end of ``src``'s row ``row`` (nothing when ``row`` is
        -1, ``src`` is ``stream`` or ``stream`` already waits for that row or a later one)."""
        if row < 0 or src == stream or self._waited.get((stream, src), -1) >= row:
            return
        if self._cols is None or not self.enabled:
            return
        self._waited[(stream, src)] = row
        self._placed = stream
        try:
            self.no_kernel_row(WAIT_NAME, OpClass.OTHER, wait=row)
        finally:
            self._placed = None

    def wait_unwaited(self) -> None:
        """The compute stream waits for every collective not waited for yet (at the end of a
        phase: DDP's reducer waits for its buckets when the backward pass ends)."""
        for stream, row in sorted({*self.unwaited.items(), *self._functional.values()}):
            self.wait(0, stream, row)
        self.unwaited.clear()
        self._in_flight.clear()
        self._functional.clear()

    def _wait_for_tensors(self, args: Any) -> None:
        """The current stream waits for the asynchronous collectives that write a storage
        ``args`` touches (module docstring)."""
        for t in _plain_tensors(args):
            found = self._in_flight.pop(storage_of(t), None)
            if found is not None:
                self.wait(self.current(), *found)

    def _group_stream(self, ranks: tuple[int, ...]) -> int:
        if ranks not in self._group_streams:
            self._group_streams[ranks] = self.new_stream()
        return self._group_streams[ranks]

    # -- rows ----------------------------------------------------------------------------
    def _row(self, **row: float) -> None:
        if self._cols is None or not self.enabled:
            return
        stream = self._placed if self._placed is not None else self.current()
        wait = int(row.pop("wait", -1))
        self._cols.append(**row, stream=stream, wait=wait)
        self.last[stream] = self.offset + len(self._cols) - 1

    def end(self) -> OpTable:
        table = super().end()
        self.offset += len(table)
        return table

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if func.namespace not in C10D_NAMESPACES or self._cols is None or not self.enabled:
            if self._in_flight and self._cols is not None and self.enabled:
                self._wait_for_tensors((args, kwargs))
            return super().__torch_dispatch__(func, types, args, kwargs)
        name = func.overloadpacket.__name__
        if name == "wait_tensor":
            found = self._functional.pop(id(args[0]), None) if args else None
            if found is not None:
                self.wait(self.current(), *found)
            return super().__torch_dispatch__(func, types, args, kwargs)
        if name in C10D_NO_KERNEL:
            return super().__torch_dispatch__(func, types, args, kwargs)
        issuing = self.current()
        comm = self._group_stream(group_ranks(args))
        self.wait(comm, issuing, self.last.get(issuing, -1))
        self._placed = comm
        try:
            out = super().__torch_dispatch__(func, types, args, kwargs)
        finally:
            self._placed = None
        row = self.last[comm]
        if func.namespace == "_c10d_functional":
            self._functional[id(out)] = (comm, row)
        elif _async_op(func, args, kwargs):
            self.unwaited[comm] = row
            for t in _plain_tensors((args, kwargs)):
                self._in_flight[storage_of(t)] = (comm, row)
        else:
            self.wait(issuing, comm, row)
        return out


def _plain_tensors(args: Any) -> Iterator[torch.Tensor]:
    """The tensors in ``args`` that own their memory (not wrapper subclasses like DTensor)."""
    for t in tree_flatten(args)[0]:
        if isinstance(t, torch.Tensor) and not is_traceable_wrapper_subclass(t):
            yield t


def _async_op(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """The ``async_op`` argument of a c10d op (its schema's default when not passed)."""
    for i, arg in enumerate(func._schema.arguments):
        if arg.name == "async_op":
            if i < len(args):
                return bool(args[i])
            return bool(kwargs.get("async_op", arg.default_value))
    return False


@contextmanager
def cpu_streams(rec: StreamRecorder) -> Iterator[None]:
    """Replace ``torch.cpu``'s stand-in streams and events with ones that report to ``rec``
    (module docstring); the originals are back on exit."""
    import torch.cpu as cpu

    class TracedStream:
        """A stream of the traced step (``number`` 0: the default stream)."""

        def __init__(self, priority: int = -1, number: int | None = None) -> None:
            del priority
            self.number = rec.new_stream() if number is None else number

        def wait_stream(self, stream: Any) -> None:
            src = int(getattr(stream, "number", 0))
            rec.wait(self.number, src, rec.last.get(src, -1))

        def record_event(self, event: Any = None) -> TracedEvent:
            event = event if event is not None else TracedEvent()
            event.record(self)
            return event  # type: ignore[no-any-return]

        def wait_event(self, event: Any) -> None:
            if isinstance(event, TracedEvent):
                rec.wait(self.number, event.stream, event.row)

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            return None

    class TracedEvent:
        """An event: the row its stream had reached when it was recorded."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            del args, kwargs
            self.stream, self.row = 0, -1

        def record(self, stream: Any = None) -> None:
            stream = stream if stream is not None else cpu.current_stream()
            self.stream = int(getattr(stream, "number", 0))
            self.row = rec.last.get(self.stream, -1)

        def wait(self, stream: Any = None) -> None:
            (stream if stream is not None else cpu.current_stream()).wait_event(self)

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            return None

    default = TracedStream(number=0)
    saved = {
        n: getattr(cpu, n) for n in ("Stream", "Event", "_default_cpu_stream", "_current_stream")
    }
    cpu.Stream, cpu.Event = TracedStream, TracedEvent  # type: ignore[misc, assignment]
    cpu._default_cpu_stream = cpu._current_stream = default  # type: ignore[assignment]
    rec._stream_now = cpu.current_stream
    try:
        yield
    finally:
        rec._stream_now = None
        for n, v in saved.items():
            setattr(cpu, n, v)
