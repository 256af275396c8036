"""The human-readable check report: findings grouped by code, with counts, the first few
locations and the fix hint; a one-line verdict at the end."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from echo_view.text import cut_middle, printable
from echo_view.validate.findings import CODES, FAMILIES, Report, Severity

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def render_report(
    report: Report, show: int = 3, changes: list[str] | None = None
) -> RenderableType:
    """The report as rich renderables (``show`` locations per code)."""
    parts: list[RenderableType] = []
    for f in report.files:
        # An unreadable file has no events and no form to show: just UNUSABLE.
        bits = [f"{f.events} events", f.form] if f.usable or f.events else []
        if f.rank is not None:
            bits.append(f"rank {f.rank}" + (f" of {f.world_size}" if f.world_size else ""))
        if f.truncated:
            bits.append("truncated")
        if not f.usable:
            bits.append("UNUSABLE")
        parts.append(Text(printable(f"{f.path}: " + ", ".join(bits)), style="dim"))
    if report.files:
        parts.append(Text(""))
    family = None
    for tally in report:
        code = CODES[tally.code]
        if code.family != family:
            family = code.family
            parts.append(Text(f"{family}xx {FAMILIES[family]}", style="bold underline"))
        head = Text()
        head.append(f"{code.code} ", style="bold")
        head.append(f"{code.severity.label:<7} ", style=_STYLE[code.severity])
        head.append(f"{code.title}  ×{tally.count}")
        if code.fixable:
            head.append("  [fixable]", style="green")
        parts.append(head)
        for finding in tally.first[:show]:
            line = Text("    ")
            where = finding.location.text()
            if where:
                line.append(printable(cut_middle(where)), style="dim")
                line.append(": ")
            line.append(printable(cut_middle(finding.message)))
            parts.append(line)
        if tally.count > show:
            parts.append(
                Text(f"    ... and {tally.count - min(show, len(tally.first))} more", style="dim")
            )
        parts.append(Text(f"    hint: {code.hint}", style="italic dim"))
    if changes:
        parts.append(Text(""))
        parts.append(Text("fixed:", style="bold green"))
        parts.extend(Text(f"    {printable(c)}") for c in changes)
    totals = report.totals()
    verdict = Text()
    exit_code = report.exit_code()
    verdict.append(
        f"{len(report.files)} file(s): {totals[Severity.ERROR]} error(s), "
        f"{totals[Severity.WARNING]} warning(s), {totals[Severity.INFO]} info(s) in "
        f"{len(report.tallies)} code(s)",
    )
    verdict.append(
        "  ->  " + {0: "OK", 1: "ERRORS", 2: "UNUSABLE INPUT"}[exit_code],
        style={0: "bold green", 1: "bold red", 2: "bold red"}[exit_code],
    )
    parts.append(Text(""))
    parts.append(verdict)
    return Group(*parts)
