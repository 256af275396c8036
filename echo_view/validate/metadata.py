"""EV5xx: process and thread identity — metadata events and pid/tid values.

Perfetto reads only four metadata events (``process_name``, ``thread_name``,
``process_sort_index``, ``thread_sort_index``), coerces numeric pid/tid to uint32 (a negative or
too large value becomes 0 and silently merges into process/thread 0) and accepts string pid/tid
as names.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from echo_view.validate.context import FileContext
from echo_view.validate.events import PH, UNSET, EventChunk, args_of
from echo_view.validate.findings import Finding, Location, Severity, define

define(
    "EV501",
    Severity.WARNING,
    "conflicting process names",
    "one pid is named twice with different process_name values; Perfetto shows one of them",
)
define(
    "EV502",
    Severity.WARNING,
    "conflicting thread names",
    "one (pid, tid) is named twice with different thread_name values",
)
define(
    "EV503",
    Severity.ERROR,
    "pid or tid outside uint32",
    "Perfetto turns a negative, fractional or too large pid/tid into 0, merging the events "
    "into another process or thread; `check --fix` remaps them to free ids",
    fixable=True,
)
define(
    "EV504",
    Severity.INFO,
    "metadata event Perfetto ignores",
    "Perfetto reads only process_name, thread_name, process_sort_index and thread_sort_index",
)
define(
    "EV505",
    Severity.WARNING,
    "malformed metadata event",
    "process_name/thread_name need args.name (a string); *_sort_index need args.sort_index "
    "(an integer)",
)
define(
    "EV506",
    Severity.INFO,
    "string pid or tid",
    "Perfetto accepts a string pid/tid and shows its text as the name; numeric ids with a "
    "process_name/thread_name event are the portable form",
)
define(
    "EV507",
    Severity.WARNING,
    "event without pid",
    "give every event a pid (and tid); Perfetto puts events without one in process 0",
)

_READ = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}
_NEEDS_PID = np.array([PH[p] for p in "XBEiICbnestf"], dtype=np.uint8)


def _bad_id(value: Any) -> bool:
    if value is UNSET or isinstance(value, str):
        return False
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return not 0 <= value <= 0xFFFFFFFF
    if isinstance(value, float):
        return not (value.is_integer() and 0 <= value <= 0xFFFFFFFF)
    return True


class MetadataRule:
    """Names per process/thread and the validity of every distinct (pid, tid) pair."""

    def __init__(self) -> None:
        self.counts = np.zeros(0, dtype=np.int64)  # events per raw (pid, tid) pair
        self.pnames: dict[Any, dict[str, int]] = {}  # resolved pid -> name -> first index
        self.tnames: dict[int, dict[str, int]] = {}  # resolved thread -> name -> first index
        self.pid_missing = 0

    def visit(self, chunk: EventChunk, ctx: FileContext) -> None:
        nraw = len(ctx.threads.infos)
        counts = np.bincount(chunk.raw_thread, minlength=nraw)
        if len(self.counts) < nraw:
            self.counts = np.concatenate([self.counts, np.zeros(nraw - len(self.counts), np.int64)])
        self.counts += counts
        ev = chunk.events
        if ctx.wants("EV507"):
            # Judge each distinct (pid, tid) pair once, then spread to the rows.
            no_pid = np.array([i.pid is UNSET for i in ctx.threads.infos], dtype=bool)
            rows = np.flatnonzero(np.isin(chunk.ph, _NEEDS_PID) & no_pid[chunk.raw_thread])
            ctx.emit_rows("EV507", chunk, rows, lambda r: f"{ev[r].ph!r} event without pid")
        for r in chunk.rows("M").tolist():
            self._meta(chunk, r, ctx)

    def _meta(self, chunk: EventChunk, r: int, ctx: FileContext) -> None:
        e = chunk.events[r]
        name = e.name
        one = np.array([r], dtype=np.intp)
        if name not in _READ:
            ctx.emit_rows("EV504", chunk, one, lambda _r: f"metadata {name!r} is ignored")
            return
        try:
            args = args_of(e)
        except msgspec.DecodeError:  # pragma: no cover - the chunk decoded already
            args = None
        if not isinstance(args, dict):
            ctx.emit_rows("EV505", chunk, one, lambda _r: f"{name} without an args object")
            return
        if name.endswith("sort_index"):
            v = args.get("sort_index")
            if isinstance(v, bool) or not isinstance(v, int):
                ctx.emit_rows("EV505", chunk, one, lambda _r: f"{name} args.sort_index={v!r}")
            return
        label = args.get("name")
        if not isinstance(label, str):
            ctx.emit_rows("EV505", chunk, one, lambda _r: f"{name} args.name={label!r}")
            return
        thread = int(chunk.thread[r])
        index = chunk.first + r
        if name == "process_name":
            pid_key = ctx.threads.label(thread)[0]
            self.pnames.setdefault(pid_key, {}).setdefault(label, index)
        else:
            self.tnames.setdefault(thread, {}).setdefault(label, index)

    def finish(self, ctx: FileContext) -> None:
        for pid_key, names in self.pnames.items():
            if len(names) > 1:
                (first, i0), *rest = names.items()
                for label, i in rest:
                    ctx.emit(
                        "EV501",
                        1,
                        [
                            Finding(
                                "EV501",
                                f"process named {label!r} here and {first!r} at traceEvents[{i0}]",
                                Location(file=ctx.path, index=i, pid=_show(pid_key)),
                            )
                        ],
                    )
        for thread, names in self.tnames.items():
            if len(names) > 1:
                (first, i0), *rest = names.items()
                pid, tid = ctx.threads.label(thread)
                for label, i in rest:
                    ctx.emit(
                        "EV502",
                        1,
                        [
                            Finding(
                                "EV502",
                                f"thread named {label!r} here and {first!r} at traceEvents[{i0}]",
                                Location(file=ctx.path, index=i, pid=pid, tid=tid),
                            )
                        ],
                    )
        bad: list[Finding] = []
        strings: list[Finding] = []
        n_bad = n_str = 0
        for rid, info in enumerate(ctx.threads.infos):
            count = int(self.counts[rid]) if rid < len(self.counts) else 0
            fields = [(f, v) for f, v in (("pid", info.pid), ("tid", info.tid))]
            odd = [f"{f}={v!r}" for f, v in fields if _bad_id(v)]
            loc = Location(
                file=ctx.path, index=info.first_index, pid=_plain(info.pid), tid=_plain(info.tid)
            )
            if odd:
                n_bad += 1
                pid, tid = ctx.threads.label(info.thread)
                bad.append(
                    Finding(
                        "EV503",
                        f"{', '.join(odd)} on {count} event(s) becomes "
                        f"pid={pid} tid={tid} in Perfetto",
                        loc,
                    )
                )
            strs = [f"{f}={v!r}" for f, v in fields if isinstance(v, str)]
            if strs:
                n_str += 1
                strings.append(Finding("EV506", f"{', '.join(strs)} on {count} event(s)", loc))
        ctx.emit("EV503", n_bad, bad)
        ctx.emit("EV506", n_str, strings)


def _plain(value: Any) -> int | str | None:
    if value is UNSET or value is None:
        return None
    return value if isinstance(value, int | str) else repr(value)


def _show(key: Any) -> Any:
    if isinstance(key, tuple):
        return key[1]
    return key
