"""Put the ranks of a job on one clock (``Job.alignment``).

NCCL collectives end together on every participant (the last chunk lands everywhere at once), so
the spread of one collective's end across ranks measures how far their clocks disagree.

1. One rank: ``single-rank``.
2. Every rank on absolute epoch time (``baseTimeNanoseconds`` applied, or epoch µs): the ranks
   were traced against host clocks that may already agree. If a collective of the lowest rank
   ends, on every other rank, within :data:`SHARED_CLOCK_LIMIT_NS` (same kind, nearest end),
   the clocks are kept (``shared-host-clock``, offsets 0) and the spread of the first such
   collective is the uncertainty; when some rank has no collective it is unknown (-1).
3. Otherwise, or when the spread is larger: ``collective-end`` shifts every rank so that the
   first collective common to all ranks ends at the same time as on the lowest rank; the
   uncertainty is the largest spread left on the other common collectives (-1 when there is no
   other one).
4. No common collective and no shared epoch: ``none`` (offsets 0, uncertainty -1).

A collective is identified across ranks by (process group, sequence number); collectives of an
unknown group by their position among such collectives on each rank. Both must agree in kind.
"""

from __future__ import annotations

import numpy as np

from echo_view.model import NONE, ClockAlignment, Trace
from importers.kineto.rows import unique

#: Largest end spread of a common collective still read as one shared clock (100 µs: the
#: skew of NTP-synchronised hosts is larger, GPUs of one host end within a few µs).
SHARED_CLOCK_LIMIT_NS = 100_000
_EPOCH_MIN_NS = 946_684_800 * 10**9  # 2000-01-01
_EPOCH_MAX_NS = 4_102_444_800 * 10**9  # 2100-01-01

Key = tuple[object, ...]


def collective_ends(trace: Trace) -> dict[Key, tuple[int, int]]:
    """``key -> (kind, end ns)`` of each collective of ``trace``."""
    col = trace.collectives
    ev = trace.events
    ends = ev.end_ns
    out: dict[Key, tuple[int, int]] = {}
    unknown = 0
    for i in np.argsort(ev.start_ns[col.event], kind="stable").tolist():
        g, seq = int(col.group[i]), int(col.seq[i])
        if g != NONE and seq != NONE:
            group = trace.groups[g]
            key: Key = ("group", group.name, group.ranks, seq)
        else:
            key = ("order", unknown)
            unknown += 1
        out.setdefault(key, (int(col.kind[i]), int(ends[col.event[i]])))
    return out


def _common(traces: list[Trace]) -> list[tuple[Key, list[int]]]:
    """Collectives present on every rank with one kind: ``(key, ends)``, in end order."""
    per = [collective_ends(t) for t in traces]
    keys = set(per[0])
    for p in per[1:]:
        keys &= set(p)
    out = []
    for k in keys:
        kinds = {p[k][0] for p in per}
        if len(kinds) == 1:
            out.append((k, [p[k][1] for p in per]))
    out.sort(key=lambda item: item[1][0])
    return out


def _is_epoch(trace: Trace) -> bool:
    if not len(trace):
        return False
    start = int(trace.events.start_ns.min())
    return _EPOCH_MIN_NS <= start < _EPOCH_MAX_NS


def _near_shared(traces: list[Trace]) -> int | None:
    """End spread of the first collective of the lowest rank that every other rank ends, in
    the same kind, within :data:`SHARED_CLOCK_LIMIT_NS` of it (None when there is none).

    Matching by time rather than by sequence is right here because the clocks are assumed to
    agree already, and it is robust to profiling windows that start at different collectives.
    """
    per = []
    for t in traces:
        col = t.collectives
        ends = t.events.end_ns[col.event]
        per.append({k: np.sort(ends[col.kind == k]) for k in unique(col.kind).tolist()})
    ref = per[0]
    candidates = sorted((int(e), k) for k, ends in ref.items() for e in ends.tolist())
    for end, kind in candidates:
        found = [end]
        for other in per[1:]:
            theirs = other.get(kind)
            if theirs is None or not len(theirs):
                break
            j = int(np.searchsorted(theirs, end))
            near = [int(theirs[i]) for i in (j - 1, j) if 0 <= i < len(theirs)]
            best = min(near, key=lambda e: abs(e - end))
            if abs(best - end) > SHARED_CLOCK_LIMIT_NS:
                break
            found.append(best)
        else:
            return max(found) - min(found)
    return None


def align(traces: list[Trace]) -> ClockAlignment:
    """The clock alignment of ``traces`` (in the order given)."""
    n = len(traces)
    if n == 1:
        return ClockAlignment("single-rank", (0,), 0)
    if all(_is_epoch(t) for t in traces):
        if not all(len(t.collectives) for t in traces):
            return ClockAlignment(
                "shared-host-clock",
                (0,) * n,
                NONE,
                "every rank is on absolute epoch time; some rank has no collective to check "
                "how well the clocks agree",
            )
        spread = _near_shared(traces)
        if spread is not None:
            return ClockAlignment(
                "shared-host-clock",
                (0,) * n,
                spread,
                f"every rank is on absolute epoch time; the first collective common to all "
                f"ranks ends within {spread} ns across them",
            )
    common = _common(traces)
    if not common:
        return ClockAlignment(
            "none", (0,) * n, NONE, "no collective common to all ranks; clocks left as recorded"
        )
    anchor = common[0][1]
    offsets = tuple(anchor[0] - e for e in anchor)
    residual = [
        max(e + o for e, o in zip(ends, offsets, strict=True))
        - min(e + o for e, o in zip(ends, offsets, strict=True))
        for _, ends in common[1:]
    ]
    note = f"aligned on the end of the first of {len(common)} collectives common to all ranks"
    if not residual:
        return ClockAlignment(
            "collective-end", offsets, NONE, note + "; no other one to estimate the error"
        )
    return ClockAlignment("collective-end", offsets, max(residual), note)
