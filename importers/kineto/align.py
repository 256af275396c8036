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

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from echo_view.model import NONE, ClockAlignment, Trace
from importers.kineto.rows import unique

#: Largest end spread of a common collective still read as one shared clock (100 µs: the
#: skew of NTP-synchronised hosts is larger, GPUs of one host end within a few µs).
SHARED_CLOCK_LIMIT_NS = 100_000
_EPOCH_MIN_NS = 946_684_800 * 10**9  # 2000-01-01
_EPOCH_MAX_NS = 4_102_444_800 * 10**9  # 2100-01-01

Key = tuple[object, ...]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class ClockFacts:
    """What the alignment needs of one rank, O(collectives) and no events: whether it is on
    epoch time, each collective key's kind and end (first occurrence, in start order), and the
    kind and end of every collective."""

    epoch: bool
    keys: tuple[object, ...]
    key_kind: I64
    key_end: I64
    kind: I64
    end: I64

    def interned(self, ids: dict[object, int]) -> ClockFacts:
        """The same facts with each key replaced by its number in ``ids`` (shared by the
        job's ranks, extended here): a key's text is then held once per job, not per rank."""
        return replace(self, keys=tuple(ids.setdefault(k, len(ids)) for k in self.keys))


def clock_facts(trace: Trace) -> ClockFacts:
    """The :class:`ClockFacts` of ``trace``."""
    ends = collective_ends(trace)
    col = trace.collectives
    return ClockFacts(
        epoch=_is_epoch(trace),
        keys=tuple(ends),
        key_kind=np.array([k for k, _ in ends.values()], dtype=np.int64),
        key_end=np.array([e for _, e in ends.values()], dtype=np.int64),
        kind=np.asarray(col.kind, dtype=np.int64),
        end=np.asarray(trace.events.end_ns[col.event], dtype=np.int64),
    )


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


def _common(ranks: list[ClockFacts]) -> list[tuple[object, list[int]]]:
    """Collectives present on every rank with one kind: ``(key, ends)``, in end order (ties in
    the lowest rank's start order)."""
    first = ranks[0]
    keys = set(first.keys)
    for f in ranks[1:]:
        keys.intersection_update(f.keys)
    # Gathered one rank at a time: only the common keys' ends are kept for every rank.
    kinds: dict[object, int] = {}
    ends: dict[object, list[int]] = {}
    for k, kind, end in zip(
        first.keys, first.key_kind.tolist(), first.key_end.tolist(), strict=True
    ):
        if k in keys:
            kinds[k], ends[k] = kind, [end]
    mixed: set[object] = set()
    for f in ranks[1:]:
        for k, kind, end in zip(f.keys, f.key_kind.tolist(), f.key_end.tolist(), strict=True):
            if k in ends:
                ends[k].append(end)
                if kind != kinds[k]:
                    mixed.add(k)
    out = [(k, e) for k, e in ends.items() if k not in mixed]
    out.sort(key=lambda item: item[1][0])
    return out


def _is_epoch(trace: Trace) -> bool:
    if not len(trace):
        return False
    start = int(trace.events.start_ns.min())
    return _EPOCH_MIN_NS <= start < _EPOCH_MAX_NS


def _near_shared(ranks: list[ClockFacts]) -> int | None:
    """End spread of the first collective of the lowest rank that every other rank ends, in
    the same kind, within :data:`SHARED_CLOCK_LIMIT_NS` of it (None when there is none).

    Matching by time rather than by sequence is right here because the clocks are assumed to
    agree already, and it is robust to profiling windows that start at different collectives.
    """
    per = []
    for f in ranks:
        per.append({k: np.sort(f.end[f.kind == k]) for k in unique(f.kind).tolist()})
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
    return align_ranks([clock_facts(t) for t in traces])


def align_ranks(ranks: list[ClockFacts]) -> ClockAlignment:
    """The clock alignment of ranks given by their :class:`ClockFacts` (in the order given)."""
    n = len(ranks)
    if n == 1:
        return ClockAlignment("single-rank", (0,), 0)
    if all(f.epoch for f in ranks):
        if not all(len(f.kind) for f in ranks):
            return ClockAlignment(
                "shared-host-clock",
                (0,) * n,
                NONE,
                "every rank is on absolute epoch time; some rank has no collective to check "
                "how well the clocks agree",
            )
        spread = _near_shared(ranks)
        if spread is not None:
            return ClockAlignment(
                "shared-host-clock",
                (0,) * n,
                spread,
                f"every rank is on absolute epoch time; the first collective common to all "
                f"ranks ends within {spread} ns across them",
            )
    common = _common(ranks)
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
