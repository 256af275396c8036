"""EV7xx: consistency across the ranks of one job.

Every rank of a process group must run the same collectives in the same order with the same
sizes and dtypes, or the job hangs or computes garbage; a collective ends at about the same
instant on every rank, so a constant offset between ranks' end times is clock skew; a rank whose
step takes much longer than the others' is a straggler.

The rules read one :class:`~echo_view.validate.summary.RankSummary` per rank. Collectives of
a process group are matched across its members by sequence number when every member records
one, else by their order in the group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from echo_view.model.collectives import COLLECTIVES
from echo_view.units import NS_PER_US, format_duration
from echo_view.validate.findings import Finding, Location, Report, Severity, define
from echo_view.validate.summary import UNKNOWN_GROUP, RankSummary, rank_from_name

define(
    "EV701",
    Severity.WARNING,
    "ranks missing from the job",
    "the world size says more ranks ran than files were given; collective checks cover only "
    "the ranks present",
)
define(
    "EV702",
    Severity.ERROR,
    "conflicting rank identity",
    "two files claim one rank, a rank is outside the world size, or files disagree on the "
    "world size: give each rank's file once",
)
define(
    "EV703",
    Severity.ERROR,
    "different number of collectives in a process group",
    "every member of a process group must run every collective; a rank that runs fewer makes "
    "the others wait forever (a hang), unless the capture windows differ",
)
define(
    "EV704",
    Severity.ERROR,
    "collectives in a different order",
    "members of a process group ran different collectives at the same position: a desync "
    "that hangs or corrupts data",
)
define(
    "EV705",
    Severity.ERROR,
    "collective sizes differ across ranks",
    "the same collective moves a different number of elements on different ranks",
)
define(
    "EV706",
    Severity.ERROR,
    "collective dtypes differ across ranks",
    "the same collective uses a different dtype on different ranks",
)
define(
    "EV707",
    Severity.WARNING,
    "clock skew between ranks",
    "collectives end at the same instant on every rank, yet this rank's ends are offset by "
    "a constant: align the ranks' clocks before comparing their timelines",
)
define(
    "EV708",
    Severity.WARNING,
    "straggler rank",
    "this rank's step takes much longer than the median rank's: look for a slow GPU, host "
    "contention or data loading on it",
)
define(
    "EV709",
    Severity.ERROR,
    "process group membership differs across ranks",
    "ranks describe one process group with different member lists",
)
define(
    "EV710",
    Severity.INFO,
    "rank not recorded in the trace",
    "the file has no distributedInfo.rank; the rank was taken from the file name or order",
)

define(
    "EV711",
    Severity.INFO,
    "captures of different runs",
    "the files did not run at the same time, so they are not ranks of one run and the "
    "cross-rank rules (EV7xx) were not applied: check each capture alone, or give the captures "
    "of one run",
)

#: Collective kinds whose per-rank sizes must be equal on every member.
SYMMETRIC = frozenset(c.kind.label for c in COLLECTIVES if c.matched)
#: Skew below this is noise (kernel end jitter is a few µs on one host).
SKEW_THRESHOLD_NS = 50 * NS_PER_US
#: A step this much longer than the median rank's marks a straggler.
STRAGGLER_RATIO = 1.15


def _ranges(values: Sequence[int]) -> str:
    """``0-3, 7, 9-12`` for a set of ranks."""
    vals = sorted(set(values))
    out: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ", ".join(out[:8]) + (", ..." if len(out) > 8 else "")


def check_job(summaries: Sequence[RankSummary], report: Report, name: str = "job") -> None:
    """Run every EV7xx rule over the ranks of one job (``name`` locates job-wide findings)."""
    ranks = _identity(summaries, report, Location(file=name, where="job"))
    if len(ranks) < 2:
        return
    _groups(ranks, report)
    matches = [
        m
        for g in sorted({g for s in ranks.values() for g in s.group})
        if (m := _match(g, ranks, report)) is not None
    ]
    for m in matches:
        _compare(m, report)
    _skew(matches, report)
    _stragglers(ranks, report)


def _loc(s: RankSummary, index: int | None = None, where: str | None = None) -> Location:
    return Location(file=s.source, rank=s.rank, index=index, where=where)


def _identity(
    summaries: Sequence[RankSummary], report: Report, job: Location
) -> dict[int, RankSummary]:
    by_rank: dict[int, RankSummary] = {}
    for pos, s in enumerate(summaries):
        if s.rank is None:
            s.rank = rank_from_name(s.source.rsplit("/", 1)[-1])
            s.rank_recorded = False
            if s.rank is None:
                s.rank = pos
        if not s.rank_recorded:
            report.add(Finding("EV710", f"rank {s.rank} assumed", _loc(s)))
        if s.rank in by_rank:
            other = by_rank[s.rank].source
            report.add(Finding("EV702", f"rank {s.rank} is also claimed by {other}", _loc(s)))
            continue
        by_rank[s.rank] = s
    sizes = {s.world_size for s in summaries if s.world_size is not None}
    if len(sizes) > 1:
        report.add(Finding("EV702", f"files disagree on the world size: {sorted(sizes)}", job))
    elif sizes:
        world = sizes.pop()
        for r in by_rank:
            if not 0 <= r < world:
                report.add(
                    Finding("EV702", f"rank {r} is outside world size {world}", _loc(by_rank[r]))
                )
        missing = [r for r in range(world) if r not in by_rank]
        if missing:
            msg = f"{len(by_rank)} of {world} ranks present; missing ranks {_ranges(missing)}"
            report.add(Finding("EV701", msg, job))
    return dict(sorted(by_rank.items()))


def _groups(ranks: dict[int, RankSummary], report: Report) -> None:
    seen: dict[str, tuple[tuple[int, ...], int]] = {}
    for r, s in ranks.items():
        for name, members in s.groups.items():
            if name not in seen:
                seen[name] = (members, r)
            elif seen[name][0] != members:
                msg = (
                    f"process group {name!r} has ranks {list(members)} here and "
                    f"{list(seen[name][0])} on rank {seen[name][1]}"
                )
                report.add(Finding("EV709", msg, _loc(s)))


@dataclass
class _Matched:
    """One process group's collectives matched across its members: ``rows[r][k]`` is the row
    (in rank ``r``'s summary) of the group's ``k``-th collective."""

    group: str
    label: str
    ranks: dict[int, RankSummary]
    rows: dict[int, npt.NDArray[np.intp]]

    @property
    def members(self) -> list[int]:
        return list(self.rows)


def _label(group: str) -> str:
    if group == UNKNOWN_GROUP:
        return "collectives without a process group (compared as one group)"
    return f"process group {group!r}"


def _match(group: str, ranks: dict[int, RankSummary], report: Report) -> _Matched | None:
    """Align the group's collectives across members; report EV703 on count mismatches."""
    declared: set[int] = set()
    for s in ranks.values():
        declared.update(s.groups.get(group, ()))
    users = {r for r, s in ranks.items() if group in s.group}
    members = sorted(users if group == UNKNOWN_GROUP else (declared & set(ranks)) | users)
    if len(members) < 2:
        return None
    label = _label(group)
    pos = {
        r: np.array([i for i, g in enumerate(ranks[r].group) if g == group], np.intp)
        for r in members
    }
    seqs = {r: ranks[r].seq[p] for r, p in pos.items()}
    by_seq = all(len(q) and (q >= 0).all() for q in seqs.values())
    if by_seq:
        common = set.intersection(*(set(q.tolist()) for q in seqs.values()))
        every = set.union(*(set(q.tolist()) for q in seqs.values()))
        for r, q in seqs.items():
            lacking = sorted(every - set(q.tolist()))
            if lacking:
                msg = f"{label}: rank {r} lacks sequence number(s) {_ranges(lacking)}"
                report.add(Finding("EV703", msg, _loc(ranks[r])))
        keep = sorted(common)
        rows = {}
        for r, p in pos.items():
            where = {int(v): i for i, v in enumerate(seqs[r].tolist())}
            rows[r] = p[[where[v] for v in keep]] if keep else p[:0]
        return _Matched(group, label, ranks, rows)
    counts = {r: len(p) for r, p in pos.items()}
    if len(set(counts.values())) > 1:
        values = list(counts.values())
        usual = max(set(values), key=values.count)
        others = _ranges([q for q, m in counts.items() if m == usual])
        for r, n in counts.items():
            if n != usual:
                msg = f"{label}: rank {r} ran {n} collective(s), ranks {others} ran {usual}"
                report.add(Finding("EV703", msg, _loc(ranks[r])))
    n = min(counts.values())
    return _Matched(group, label, ranks, {r: p[:n] for r, p in pos.items()})


def _compare(m: _Matched, report: Report) -> None:
    """EV704 (kind/order), EV705 (size), EV706 (dtype) against the first member."""
    ref_rank, *others = m.members
    ref, rp = m.ranks[ref_rank], m.rows[ref_rank]
    found: dict[str, list[Finding]] = {"EV704": [], "EV705": [], "EV706": []}
    counts = dict.fromkeys(found, 0)

    def add(code: str, text: str, s: RankSummary, row: int) -> None:
        counts[code] += 1
        if len(found[code]) < report.keep:
            found[code].append(Finding(code, text, _loc(s, int(s.index[row]))))

    for r in others:
        s, sp = m.ranks[r], m.rows[r]
        for k, (i, j) in enumerate(zip(rp.tolist(), sp.tolist(), strict=True)):
            a, b = ref.kind[i], s.kind[j]
            what = f"{m.label}, collective #{k}"
            if a != b and "unknown" not in (a, b):
                add("EV704", f"{what}: rank {r} ran {b}, rank {ref_rank} ran {a}", s, j)
                continue
            if a in SYMMETRIC:
                for side, x, y in (
                    ("input", ref.in_size[i], s.in_size[j]),
                    ("output", ref.out_size[i], s.out_size[j]),
                ):
                    if x >= 0 and y >= 0 and x != y:
                        text = f"{what} ({a}): {side} size {y} on rank {r}, {x} on rank {ref_rank}"
                        add("EV705", text, s, j)
                        break
            da, db = ref.dtype[i], s.dtype[j]
            if da and db and da.lower() != db.lower():
                add("EV706", f"{what} ({a}): dtype {db} on rank {r}, {da} on rank {ref_rank}", s, j)
    for code, first in found.items():
        report.add_many(code, counts[code], first)


def _skew(matches: list[_Matched], report: Report) -> None:
    """Per rank: median over matched collectives of (its end - the median end of all ranks)."""
    offsets: dict[int, list[int]] = {}
    ranks: dict[int, RankSummary] = {}
    for m in matches:
        rows = m.rows
        n = min(len(p) for p in rows.values())
        if n == 0:
            continue
        same = np.ones(n, dtype=bool)
        ref = m.members[0]
        for r in m.members[1:]:
            same &= np.array(
                [
                    m.ranks[r].kind[j] == m.ranks[ref].kind[i]
                    for i, j in zip(rows[ref][:n].tolist(), rows[r][:n].tolist(), strict=True)
                ],
                dtype=bool,
            )
        if not same.any():
            continue
        ends = np.stack([m.ranks[r].end_ns[rows[r][:n]][same] for r in m.members])
        med = np.median(ends, axis=0)
        for i, r in enumerate(m.members):
            offsets.setdefault(r, []).extend((ends[i] - med).astype(np.int64).tolist())
            ranks[r] = m.ranks[r]
    for r, offs in sorted(offsets.items()):
        if len(offs) < 2:
            continue
        off = int(np.median(offs))
        spread = int(np.percentile(offs, 75) - np.percentile(offs, 25))
        if abs(off) > SKEW_THRESHOLD_NS and spread < abs(off):
            direction = "later" if off > 0 else "earlier"
            msg = (
                f"rank {r}'s collectives end {format_duration(abs(off))} {direction} than the "
                f"median rank's (median of {len(offs)}, interquartile spread "
                f"{format_duration(spread)})"
            )
            report.add(Finding("EV707", msg, _loc(ranks[r])))


def _stragglers(ranks: dict[int, RankSummary], report: Report) -> None:
    steps: dict[int, dict[int, int]] = {}
    for r, s in ranks.items():
        for num, a, b in zip(
            s.step_number.tolist(), s.step_start_ns.tolist(), s.step_end_ns.tolist(), strict=True
        ):
            steps.setdefault(num, {})[r] = b - a
    for num in sorted(steps):
        durs = steps[num]
        if len(durs) < 2:
            continue
        med = float(np.median(list(durs.values())))
        if med <= 0:
            continue
        for r, d in durs.items():
            if d > med * STRAGGLER_RATIO:
                msg = (
                    f"step {num} took {format_duration(d)} on rank {r}, {d / med:.2f}x the "
                    f"median {format_duration(med)} over {len(durs)} ranks"
                )
                report.add(Finding("EV708", msg, _loc(ranks[r], where=f"ProfilerStep#{num}")))
