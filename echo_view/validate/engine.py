"""The validator: feeds chunks of events through the rules of one file, then the job rules.

Usage (the CLI does this with the chunks its container reader yields)::

    report = Report()
    v = FileValidator("trace.json", report)
    for first, events in chunks:          # events: RawEvent structs, dicts or JSON bytes
        v.feed(events, first)
    summary = v.finish(facts)            # facts: ContainerFacts from the reader
    check_job([summary, ...], report)    # cross-rank rules when several ranks form a job
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from echo_view.model.job import rank_problem
from echo_view.validate.container import ContainerFacts, check_container
from echo_view.validate.context import FileContext, Rule
from echo_view.validate.crossrank import check_job
from echo_view.validate.events import (
    RawEvent,
    build_chunk,
    events_from_objects,
)
from echo_view.validate.findings import FileFacts, Finding, Location, Report
from echo_view.validate.flows import FlowRule
from echo_view.validate.kineto import KinetoRule
from echo_view.validate.metadata import MetadataRule
from echo_view.validate.nesting import NestingRule
from echo_view.validate.schema import SchemaRule
from echo_view.validate.summary import RankSummary

#: Rows per chunk when a caller hands over more events at once (bounds temporary memory).
CHUNK_ROWS = 65_536


class FileValidator:
    """Checks one trace file, chunk by chunk; per-thread state is kept as compact columns."""

    def __init__(self, path: str, report: Report) -> None:
        self.report = report
        self.ctx = FileContext(path=path, report=report, facts=ContainerFacts(path))
        fam = {f for f in ("EV2", "EV3", "EV4", "EV5", "EV6", "EV7") if _wants_family(report, f)}
        self.schema = SchemaRule()
        self.metadata = MetadataRule()
        self.nesting = NestingRule()
        self.flows = FlowRule()
        self.kineto = KinetoRule()
        # Skip rules nobody asked for (nesting feeds the flow and window rules).
        self.visitors: list[Rule] = []
        if "EV2" in fam:
            self.visitors.append(self.schema)
        if "EV5" in fam:
            self.visitors.append(self.metadata)
        if fam & {"EV3", "EV4", "EV6"}:
            self.visitors.append(self.nesting)
        if "EV4" in fam:
            self.visitors.append(self.flows)
        if fam & {"EV6", "EV7"}:
            self.visitors.append(self.kineto)
        self.events = 0

    def feed(self, events: Sequence[RawEvent] | Sequence[Mapping[str, Any]], first: int) -> None:
        """Check ``events`` (``traceEvents[first:first+len(events)]``)."""
        evs: Sequence[RawEvent]
        if events and not isinstance(events[0], RawEvent):
            evs = events_from_objects(events)
        else:
            evs = events  # type: ignore[assignment]
        for lo in range(0, len(evs), CHUNK_ROWS):
            part = evs[lo : lo + CHUNK_ROWS]
            chunk = build_chunk(part, first + lo, self.ctx.threads, self.ctx.strings)
            for rule in self.visitors:
                rule.visit(chunk, self.ctx)
        self.events = max(self.events, first + len(evs))

    def finish(self, facts: ContainerFacts | None = None) -> RankSummary:
        """Run the end-of-file rules; returns what the cross-rank rules need of this rank."""
        ctx = self.ctx
        if facts is None:
            facts = ContainerFacts(ctx.path, events=self.events)
        ctx.facts = facts
        check_container(facts, self.report)
        for rule in (self.nesting, self.flows, self.kineto, self.metadata, self.schema):
            if rule in self.visitors:
                rule.finish(ctx)
        info = facts.top.get("distributedInfo") if facts.top else None
        info = info if isinstance(info, dict) else {}
        problem = rank_problem(info.get("rank"), info.get("world_size"))
        if problem is not None:
            self.report.add(Finding("EV702", problem, Location(file=ctx.path)))
            info = {}
        self.report.files.append(
            FileFacts(
                path=ctx.path,
                form=facts.form,
                events=facts.events or self.events,
                truncated=facts.truncated,
                rank=info.get("rank") if isinstance(info.get("rank"), int) else None,
                world_size=info.get("world_size")
                if isinstance(info.get("world_size"), int)
                else None,
                usable=facts.usable,
                export_ranks=_export_ranks(facts.top),
            )
        )
        return self.kineto.summary(ctx)


def _export_ranks(top: Mapping[str, Any] | None) -> tuple[int, ...]:
    """The ranks of an echo-view export (its ``metadata``: generator and ranks), when it holds
    more than one; their cross-rank rules need the file cut into ranks, as it is imported."""
    meta = top.get("metadata") if top else None
    if not isinstance(meta, dict) or meta.get("generator") != "echo-view":
        return ()
    if meta.get("predicted") is not False:
        # A predicted job's data-parallel and pipeline collectives carry no process group
        # yet, and the rules would compare them all as one group across pipeline stages.
        return ()
    ranks = meta.get("ranks")
    if not isinstance(ranks, list) or not all(type(r) is int for r in ranks):
        return ()
    return tuple(ranks) if len(set(ranks)) > 1 else ()


def _wants_family(report: Report, family: str) -> bool:
    from echo_view.validate.findings import CODES

    return any(report.wants(c) for c in CODES if c.startswith(family))


def validate_document(
    doc: Any, path: str = "<memory>", report: Report | None = None
) -> tuple[Report, RankSummary]:
    """Check an in-memory trace: an object with ``traceEvents`` or an array of events."""
    report = report if report is not None else Report()
    v = FileValidator(path, report)
    if isinstance(doc, list):
        facts = ContainerFacts(path, form="array", events=len(doc))
        v.feed(list(events_from_objects(doc)), 0)
    elif isinstance(doc, dict):
        top = {k: val for k, val in doc.items() if k != "traceEvents"}
        facts = ContainerFacts(path, form="object", top=top)
        evs = doc.get("traceEvents")
        if evs is None:
            facts.not_a_trace = "the object has no traceEvents"
        elif not isinstance(evs, list):
            facts.trace_events_type = type(evs).__name__
        else:
            facts.events = len(evs)
            v.feed(events_from_objects(evs), 0)
    else:
        facts = ContainerFacts(
            path, form="unknown", not_a_trace=f"the JSON is a {type(doc).__name__}"
        )
    return report, v.finish(facts)


def validate_job(docs: Iterable[tuple[str, Any]], report: Report | None = None) -> Report:
    """Check several in-memory rank documents as one job (file rules plus EV7xx)."""
    report = report if report is not None else Report()
    summaries = [validate_document(doc, path, report)[1] for path, doc in docs]
    check_job(summaries, report, "job")
    return report
