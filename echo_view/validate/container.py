"""EV1xx: the container — JSON syntax, object or array form, truncation, top-level keys.

The reader that opens the file (gzip or not) fills a :class:`ContainerFacts`; these rules judge
it the way Perfetto's JSON importer would (``../research/formats.md`` section 1.1): only
``traceEvents``, ``systemTraceEvents``, ``metadata`` and ``displayTimeUnit`` are read, every
other top-level key is skipped, a truncated *array* is accepted and a truncated object is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from echo_view.validate.findings import Finding, Location, Report, Severity, define

EV101 = define(
    "EV101",
    Severity.ERROR,
    "invalid JSON",
    "fix the syntax at the reported line and column; a file cut short in object form cannot "
    "be read by Perfetto",
    fatal=True,
)
EV102 = define(
    "EV102",
    Severity.ERROR,
    "not a Chrome/Perfetto trace",
    "the top level must be an array of events or an object with a traceEvents array",
    fatal=True,
)
EV103 = define(
    "EV103",
    Severity.ERROR,
    "traceEvents is not an array",
    "make traceEvents a JSON array of event objects",
    fatal=True,
)
EV104 = define(
    "EV104",
    Severity.WARNING,
    "truncated array",
    "the closing ']' is missing: Perfetto and catapult accept it, strict JSON readers do not; "
    "`check --fix` closes the array",
    fixable=True,
)
EV105 = define(
    "EV105",
    Severity.INFO,
    "top-level keys Perfetto ignores",
    "Perfetto reads only traceEvents, systemTraceEvents, metadata and displayTimeUnit; keep "
    "other data in metadata if a viewer must see it (baseTimeNanoseconds is never applied: "
    "per-rank files line up only where their bases are equal, or once merged by "
    "`echo-view export`)",
)
EV106 = define(
    "EV106",
    Severity.WARNING,
    "unsupported displayTimeUnit",
    'use "ms" or "ns": catapult rejects other units; Perfetto ignores the key',
)
EV107 = define(
    "EV107",
    Severity.WARNING,
    "no events",
    "the trace holds no events: check that the profiler recorded anything",
)
EV108 = define(
    "EV108",
    Severity.ERROR,
    "corrupt or truncated compressed stream",
    "the gzip stream ends early or is damaged; copy the file again",
    fatal=True,
)

#: Top-level keys Perfetto's JSON importer reads.
PERFETTO_KEYS = frozenset({"traceEvents", "systemTraceEvents", "metadata", "displayTimeUnit"})


@dataclass
class JsonErrorInfo:
    """Where the JSON text is invalid."""

    message: str
    line: int | None = None
    column: int | None = None
    offset: int | None = None

    def where(self) -> str:
        if self.line is not None and self.column is not None:
            return f"line {self.line} column {self.column}"
        if self.offset is not None:
            return f"byte {self.offset}"
        return ""


@dataclass
class ContainerFacts:
    """What the reader learned about a file before and around its events.

    ``form`` is ``object`` or ``array`` (``unknown`` when unreadable). ``top`` holds the small
    top-level values (everything but the events), e.g. ``distributedInfo``.
    """

    path: str
    form: str = "object"
    top: Mapping[str, Any] = field(default_factory=dict)
    truncated: bool = False
    events: int = 0
    json_error: JsonErrorInfo | None = None
    compression_error: str | None = None
    not_a_trace: str | None = None  # why, when the JSON is no trace at all
    trace_events_type: str | None = None  # JSON type of traceEvents when it is not an array

    @property
    def usable(self) -> bool:
        return not (
            self.json_error
            or self.compression_error
            or self.not_a_trace
            or self.trace_events_type is not None
        )


def check_container(facts: ContainerFacts, report: Report) -> None:
    """Report the EV1xx findings of one file."""
    loc = Location(file=facts.path)
    if facts.compression_error:
        report.add(Finding("EV108", facts.compression_error, loc))
    if facts.json_error is not None:
        err = facts.json_error
        report.add(
            Finding("EV101", err.message, Location(file=facts.path, where=err.where() or None))
        )
    if facts.not_a_trace:
        report.add(Finding("EV102", facts.not_a_trace, loc))
    if facts.trace_events_type is not None:
        report.add(Finding("EV103", f"traceEvents is a JSON {facts.trace_events_type}", loc))
    if facts.truncated and facts.form == "array":
        report.add(
            Finding(
                "EV104",
                f"the array ends after {facts.events} events without a closing ']'",
                loc,
            )
        )
    if facts.form == "object":
        ignored = [k for k in facts.top if k not in PERFETTO_KEYS]
        note = ""
        if "baseTimeNanoseconds" in ignored:
            if one_rank_of_several(facts.top):
                note = (
                    "; baseTimeNanoseconds is not applied, so this rank's file lines up with "
                    "the other ranks' files in Perfetto only where they share its base"
                )
            else:
                # A base common to every event of the file: ignoring it moves nothing relative
                # to anything else shown (all ranks of a merged job file share it).
                ignored.remove("baseTimeNanoseconds")
        if ignored:
            shown = ", ".join(ignored[:12]) + (", ..." if len(ignored) > 12 else "")
            report.add(
                Finding("EV105", f"{len(ignored)} key(s) ignored by Perfetto: {shown}{note}", loc)
            )
        unit = facts.top.get("displayTimeUnit")
        if unit is not None and unit not in ("ms", "ns"):
            report.add(Finding("EV106", f"displayTimeUnit is {unit!r}", loc))
    if facts.usable and facts.events == 0:
        report.add(Finding("EV107", "traceEvents is empty", loc))


def one_rank_of_several(top: Mapping[str, Any]) -> bool:
    """True when the file says it holds one rank of a larger job (Kineto ``distributedInfo``
    with a world size above 1): its times only line up with the other ranks' files."""
    info = top.get("distributedInfo")
    if not isinstance(info, Mapping):
        return False
    ws = info.get("world_size")
    return isinstance(ws, int) and not isinstance(ws, bool) and ws > 1


def line_column(data: bytes | memoryview, offset: int) -> tuple[int, int]:
    """1-based line and column of byte ``offset`` in ``data``."""
    view = bytes(data[: max(0, offset)])
    line = view.count(b"\n") + 1
    column = offset - (view.rfind(b"\n") + 1) + 1
    return line, column
