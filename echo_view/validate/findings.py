"""Findings: what a validation rule reports, the registry of stable codes, and the report.

Every rule owns a few codes (``EV301``). A code has a fixed severity, a title, a hint on how to
fix it, and flags telling whether ``--fix`` repairs it and whether it makes the input unusable.
A :class:`Report` counts every finding but keeps only the first few per code, so checking a
trace with millions of bad events stays small in memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from echo_view.model.schema import json_schema


class Severity(IntEnum):
    """How bad a finding is. Errors make ``check`` exit with code 1; warnings and infos do not."""

    INFO = 0
    WARNING = 1
    ERROR = 2

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Code:
    """A stable validation code and what it means."""

    code: str
    severity: Severity
    title: str
    hint: str
    fixable: bool = False
    fatal: bool = False  # the input cannot be used at all (exit code 2)

    @property
    def family(self) -> str:
        """The rule family, ``EV3`` for ``EV301``."""
        return self.code[:3]


#: Every code, by name. Rule modules add theirs at import time through :func:`define`.
CODES: dict[str, Code] = {}

#: Families and what they cover (the report and the docs use these headings).
FAMILIES: dict[str, str] = {
    "EV1": "container and syntax",
    "EV2": "event schema",
    "EV3": "nesting",
    "EV4": "flows",
    "EV5": "metadata",
    "EV6": "Kineto semantics",
    "EV7": "cross-rank consistency",
}


def define(
    code: str,
    severity: Severity,
    title: str,
    hint: str,
    *,
    fixable: bool = False,
    fatal: bool = False,
) -> Code:
    """Register a code (once); returns it so rule modules can keep a reference."""
    if code in CODES:
        raise ValueError(f"validation code {code} is defined twice")
    if code[:3] not in FAMILIES or len(code) != 5 or not code[2:].isdigit():
        raise ValueError(f"validation code {code!r} is not of the form EV<family><nn>")
    c = Code(code, severity, title, hint, fixable, fatal)
    CODES[code] = c
    return c


@dataclass(frozen=True, slots=True)
class Location:
    """Where a finding is: file, ``traceEvents`` index, the event's ``ts`` as written, its
    pid/tid, the rank, or a free-text place (``process group 0, collective #3``)."""

    file: str | None = None
    index: int | None = None
    ts: float | int | str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    rank: int | None = None
    where: str | None = None

    def text(self) -> str:
        """``file: traceEvents[12] ts=3.5 pid=1 tid=2``."""
        parts: list[str] = []
        if self.file:
            parts.append(self.file)
        inner: list[str] = []
        if self.rank is not None:
            inner.append(f"rank {self.rank}")
        if self.index is not None:
            inner.append(f"traceEvents[{self.index}]")
        if self.where:
            inner.append(self.where)
        if self.ts is not None:
            inner.append(f"ts={self.ts}")
        if self.pid is not None:
            inner.append(f"pid={self.pid!r}" if isinstance(self.pid, str) else f"pid={self.pid}")
        if self.tid is not None:
            inner.append(f"tid={self.tid!r}" if isinstance(self.tid, str) else f"tid={self.tid}")
        if inner:
            parts.append(" ".join(inner))
        return ": ".join(parts)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("file", "index", "ts", "pid", "tid", "rank", "where"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: its code, a specific message and where it is."""

    code: str
    message: str
    location: Location = field(default_factory=Location)

    @property
    def info(self) -> Code:
        return CODES[self.code]

    @property
    def severity(self) -> Severity:
        return CODES[self.code].severity

    def text(self) -> str:
        where = self.location.text()
        return f"{self.code} {where}: {self.message}" if where else f"{self.code} {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, **self.location.to_json()}


def _split_codes(specs: Iterable[str]) -> list[str]:
    out: list[str] = []
    for spec in specs:
        out.extend(s.strip().upper() for s in spec.split(",") if s.strip())
    return out


@dataclass(frozen=True, slots=True)
class Selection:
    """Which codes to report: ``--select`` and ``--ignore`` take codes or prefixes
    (``EV3``, ``EV30``, ``EV301``); an empty select means all."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()

    @classmethod
    def parse(cls, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> Selection:
        """Build a selection from command-line values (comma-separated allowed).

        Unknown codes raise :class:`ValueError` naming them, so a typo never silently selects
        nothing.
        """
        select, ignore = list(select), list(ignore)
        sel, ign = _split_codes(select), _split_codes(ignore)
        for spec in (*sel, *ign):
            if not any(code.startswith(spec) for code in CODES):
                raise ValueError(f"{spec!r} matches no validation code (codes are EV101..EV7xx)")
        # An empty --select (a blank value) read as "all", and an --ignore of everything
        # selected checked nothing and reported a clean trace.
        if select and not sel:
            raise ValueError("--select names no code (give codes or prefixes: EV3,EV601)")
        chosen = cls(tuple(sel), tuple(ign))
        if not any(chosen.wants(code) for code in CODES):
            raise ValueError("--select and --ignore leave no code to check")
        return chosen

    def wants(self, code: str) -> bool:
        if self.select and not any(code.startswith(s) for s in self.select):
            return False
        return not any(code.startswith(s) for s in self.ignore)


ALL = Selection()


@dataclass
class CodeTally:
    """The findings of one code: how many, and the first ``keep`` of them."""

    code: str
    count: int = 0
    first: list[Finding] = field(default_factory=list)


@dataclass
class FileFacts:
    """What was learned about one input file (shown in the report header)."""

    path: str
    form: str = "unknown"  # object | array | job | pftrace
    events: int = 0
    truncated: bool = False
    rank: int | None = None
    world_size: int | None = None
    usable: bool = True
    export_ranks: tuple[int, ...] = ()
    """The ranks the file holds when it is an echo-view export of several ranks (one file,
    one job); empty for a rank's own trace."""

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "form": self.form,
            "events": self.events,
            "truncated": self.truncated,
            "rank": self.rank,
            "world_size": self.world_size,
            "usable": self.usable,
        }


class Report:
    """Collects findings. Counts all of them; keeps the first ``keep`` per code."""

    def __init__(self, selection: Selection = ALL, keep: int = 20) -> None:
        self.selection = selection
        self.keep = keep
        self.tallies: dict[str, CodeTally] = {}
        self.files: list[FileFacts] = []

    def add(self, finding: Finding) -> None:
        """Record one finding (ignored when the selection excludes its code)."""
        self.add_many(finding.code, 1, (finding,))

    def add_many(self, code: str, count: int, first: Iterable[Finding]) -> None:
        """Record ``count`` findings of ``code`` of which ``first`` are the earliest ones.

        Rules that find many problems at once (vectorised) pass the total and only the first
        few materialised findings.
        """
        if count <= 0 or code not in CODES:
            if code not in CODES:
                raise KeyError(f"unknown validation code {code}")
            return
        if not self.selection.wants(code):
            return
        tally = self.tallies.get(code)
        if tally is None:
            tally = self.tallies[code] = CodeTally(code)
        tally.count += count
        room = self.keep - len(tally.first)
        if room > 0:
            for finding in first:
                tally.first.append(finding)
                room -= 1
                if room == 0:
                    break

    def merge(self, other: Report) -> None:
        """Take ``other``'s files and findings after this report's own, as if its rules had
        reported here (a file checked in another process reports into a report of its own)."""
        self.files.extend(other.files)
        for tally in other.tallies.values():
            self.add_many(tally.code, tally.count, tally.first)

    def wants(self, code: str) -> bool:
        """True when findings of ``code`` will be recorded (rules may skip work otherwise)."""
        return self.selection.wants(code)

    def count(self, code: str) -> int:
        tally = self.tallies.get(code)
        return tally.count if tally else 0

    def codes(self) -> list[str]:
        """Codes with at least one finding, in code order (families stay together)."""
        return sorted(self.tallies)

    def __iter__(self) -> Iterator[CodeTally]:
        return iter(self.tallies[c] for c in self.codes())

    def totals(self) -> dict[Severity, int]:
        """Number of findings per severity."""
        out = {s: 0 for s in Severity}
        for code, tally in self.tallies.items():
            out[CODES[code].severity] += tally.count
        return out

    @property
    def fatal(self) -> bool:
        return any(CODES[c].fatal for c in self.tallies) or any(not f.usable for f in self.files)

    def exit_code(self) -> int:
        """0: clean or only warnings/infos; 1: errors; 2: some input was unusable."""
        if self.fatal:
            return 2
        return 1 if self.totals()[Severity.ERROR] else 0

    def to_json(self) -> dict[str, Any]:
        """The stable ``--json`` document (see docs/validation-codes.md, "JSON output")."""
        totals = self.totals()
        return {
            "schema": json_schema("check"),
            "exit_code": self.exit_code(),
            "summary": {s.label + "s": totals[s] for s in sorted(Severity, reverse=True)},
            "files": [f.to_json() for f in self.files],
            "findings": [
                {
                    "code": t.code,
                    "severity": CODES[t.code].severity.label,
                    "title": CODES[t.code].title,
                    "hint": CODES[t.code].hint,
                    "fixable": CODES[t.code].fixable,
                    "count": t.count,
                    "first": [f.to_json() for f in t.first],
                }
                for t in self
            ],
        }
