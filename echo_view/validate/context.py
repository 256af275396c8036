"""What rules share while one file is checked: the report, interned threads and strings, and
helpers that turn rows into located findings without building per-event objects."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from echo_view.units import ns_to_us_text
from echo_view.validate.container import ContainerFacts
from echo_view.validate.events import EventChunk, Strings, Threads, raw_value, ts_text
from echo_view.validate.findings import Finding, Location, Report


@dataclass
class FileContext:
    """Shared state for checking one file."""

    path: str
    report: Report
    facts: ContainerFacts
    threads: Threads = field(default_factory=Threads)
    strings: Strings = field(default_factory=Strings)
    #: Per-thread slice index, built by the nesting rule at the end and read by later rules.
    slices: Any = None

    def wants(self, code: str) -> bool:
        return self.report.wants(code)

    def at_row(self, chunk: EventChunk, row: int) -> Location:
        """Location of chunk row ``row`` with the event's ts, pid and tid as written."""
        e = chunk.events[row]
        return Location(
            file=self.path,
            index=chunk.first + row,
            ts=ts_text(e.ts),
            pid=_plain(raw_value(e, "pid")),
            tid=_plain(raw_value(e, "tid")),
        )

    def at(self, index: int, ts_ns: int | None, thread: int | None) -> Location:
        """Location from columns kept after the chunk is gone (thread as Perfetto sees it)."""
        pid = tid = None
        if thread is not None and thread >= 0:
            pid, tid = self.threads.label(thread)
        return Location(
            file=self.path,
            index=index,
            ts=ns_to_us_text(ts_ns) if ts_ns is not None else None,
            pid=pid,
            tid=tid,
        )

    def emit_rows(
        self,
        code: str,
        chunk: EventChunk,
        rows: npt.NDArray[np.intp],
        message: Callable[[int], str],
    ) -> None:
        """Report one finding per row; only the first few are materialised."""
        if not len(rows) or not self.wants(code):
            return

        def gen() -> Iterator[Finding]:
            for row in rows.tolist():
                yield Finding(code, message(row), self.at_row(chunk, row))

        self.report.add_many(code, len(rows), gen())

    def emit(self, code: str, count: int, findings: Iterable[Finding]) -> None:
        if count and self.wants(code):
            self.report.add_many(code, count, findings)

    def name(self, sid: int) -> str:
        return self.strings.text(sid)


def _plain(value: Any) -> int | str | None:
    if value is None or isinstance(value, int | str):
        return value
    return repr(value)


class Rule(Protocol):
    """A stateful visitor: fed every chunk in order, then asked to finish."""

    def visit(self, chunk: EventChunk, ctx: FileContext) -> None: ...

    def finish(self, ctx: FileContext) -> None: ...
