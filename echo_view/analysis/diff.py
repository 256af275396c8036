"""Compare two jobs (predicted vs measured, or two runs): step time per rank, the category
breakdown, kernel classes and collectives, and a verdict.

Alignment:

- **Ranks** pair by rank number; within a rank, the k-th GPU device of A with the k-th of B.
  Ranks present in only one job are listed in ``notes`` and left out of every number.
- **Steps**, per rank: when neither side's steps were detected and they share step numbers
  (``ProfilerStep#N``), the common numbers pair; otherwise the steps pair by order (first with
  first) over the shorter list. ``step_alignment`` says which.

Numbers are means per aligned step, in integer ns. ``delta = B - A`` always. The *reference* is
the measured side when exactly one job is predicted, else A; ``error_pct = 100 * |B - A| /
reference`` (unsigned) and ``delta_pct = 100 * (B - A) / A`` (signed). The job's step time is
its slowest rank's. Categories follow :mod:`echo_view.analysis.breakdown`; the job-level
category value is the mean over the aligned ranks. Kernel and collective totals are per step,
summed over the aligned ranks, counting GPU work that starts inside an aligned step window.
A kernel *class* is its name without template arguments and parameters
(``void at::native::foo<4, ...>(...)`` -> ``at::native::foo``).

**Unrelated jobs** get a warning (``warnings``), not a different verdict: different rank
counts, or — when both sides are measured or both predicted, so that their kernels are named
alike — a :func:`kernel_similarity` below :data:`UNRELATED_BELOW`. On the samples, one job
against its replay or what-if scores 0.98-1.0 and a job before and after an optimisation 0.90;
different jobs score 0.01-0.04.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.analysis.breakdown import COMM, StepBreakdown, breakdown, gpu_work
from echo_view.analysis.cxx_names import qualified_base
from echo_view.errors import UsageError
from echo_view.model import GPU_KINDS, CollectiveKind, EventKind, Job, Trace, parse_comm_kernel_name
from echo_view.model.columns import groups
from echo_view.model.schema import json_schema
from echo_view.units import format_duration

I64 = npt.NDArray[np.int64]

SCHEMA = json_schema("diff")
CATEGORIES = ("compute", "comm", "exposed_comm", "memory", "idle")
#: |delta_pct| at or below this is called a match in the verdict.
DEFAULT_TOLERANCE_PCT = 2.0
#: Kernel similarity below which two jobs are called unrelated.
UNRELATED_BELOW = 0.25


@dataclass(frozen=True)
class Pair:
    """One quantity on both sides."""

    a_ns: int
    b_ns: int

    @property
    def delta_ns(self) -> int:
        return self.b_ns - self.a_ns

    def delta_pct(self) -> float | None:
        return None if self.a_ns == 0 else 100.0 * self.delta_ns / self.a_ns

    def error_pct(self, reference_is_b: bool) -> float | None:
        ref = self.b_ns if reference_is_b else self.a_ns
        return None if ref == 0 else 100.0 * abs(self.delta_ns) / ref

    def to_json(self, reference_is_b: bool) -> dict[str, Any]:
        return {
            "a_ns": self.a_ns,
            "b_ns": self.b_ns,
            "delta_ns": self.delta_ns,
            "delta_pct": _round(self.delta_pct()),
            "error_pct": _round(self.error_pct(reference_is_b)),
        }


@dataclass(frozen=True)
class RankDiff:
    """One aligned (rank, device) row."""

    rank: int
    a_device: int | None
    b_device: int | None
    steps_a: tuple[int, ...]
    steps_b: tuple[int, ...]
    step_alignment: str
    step: Pair
    categories: dict[str, Pair]


def rank_names(ranks: Sequence[RankDiff]) -> list[str]:
    """Each row's name: its rank (``3``), with its device where the rank has several rows
    (``0 gpu1``; ``0 gpu1/gpu2`` when A's and B's differ): two rows read ``r0`` alike."""
    count = Counter(r.rank for r in ranks)

    def dev(d: int | None) -> str:
        return "-" if d is None else str(d)

    out = []
    for r in ranks:
        name = str(r.rank)
        if count[r.rank] > 1:
            same = r.a_device == r.b_device
            name += f" gpu{dev(r.a_device)}" + ("" if same else f"/gpu{dev(r.b_device)}")
        out.append(name)
    return out


@dataclass(frozen=True)
class ItemDiff:
    """A kernel class or a collective class, per step over the aligned ranks."""

    name: str
    time: Pair
    a_count: float
    b_count: float


@dataclass(frozen=True)
class JobDiff:
    """The comparison; :meth:`to_json` is ``echo-view diff --json``."""

    a_source: str
    b_source: str
    a_predicted: bool
    b_predicted: bool
    ranks: list[RankDiff]
    step_time: Pair
    slowest_rank_a: int | None
    slowest_rank_b: int | None
    categories: dict[str, Pair]
    kernels: list[ItemDiff]
    collectives: list[ItemDiff]
    tolerance_pct: float
    notes: list[str] = field(default_factory=list)
    #: :func:`kernel_similarity` of the aligned ranks (None: no kernels).
    kernel_similarity: float | None = None
    #: Why A and B look like different jobs (empty when they do not).
    warnings: list[str] = field(default_factory=list)

    @property
    def reference_is_b(self) -> bool:
        """B is the reference when it alone is measured."""
        return self.a_predicted and not self.b_predicted

    @property
    def error_pct(self) -> float | None:
        """Step-time error in percent of the reference (what ``--fail-above`` checks)."""
        return self.step_time.error_pct(self.reference_is_b)

    @property
    def verdict(self) -> tuple[str, str]:
        """``(code, sentence)``; code is ``match``, ``b_slower``, ``b_faster`` or ``no_data``."""
        if not self.ranks:
            return "no_data", "no rank and step could be aligned between the two inputs"
        pct = self.step_time.delta_pct()
        if pct is None:
            return "no_data", "A has no step time to compare against"
        if not self.step_time.b_ns:  # (-100% would read as a step that takes no time at all)
            return "no_data", "B has no step time to compare against"
        a, b = format_duration(self.step_time.a_ns), format_duration(self.step_time.b_ns)
        head = f"step time A {a}, B {b} ({'+' if pct >= 0 else '-'}{_percent(abs(pct))}%)"
        if abs(pct) <= self.tolerance_pct:
            code, text = "match", f"B matches A within {self.tolerance_pct:g}%: {head}"
        else:
            code = "b_slower" if pct > 0 else "b_faster"
            text = f"B is {_percent(abs(pct))}% {'slower' if pct > 0 else 'faster'} than A: {head}"
        cat = max(self.categories.items(), key=lambda kv: abs(kv[1].delta_ns), default=None)
        if cat is not None and cat[1].delta_ns:
            text += f"; largest category change: {cat[0]} {_signed(cat[1].delta_ns)}"
        if self.kernels and self.kernels[0].time.delta_ns:
            k = self.kernels[0]
            text += f"; top kernel class: {k.name} {_signed(k.time.delta_ns)}"
        return code, text

    def to_json(self) -> dict[str, Any]:
        """The stable object documented in docs/cli.md (keys are only ever added)."""
        ref_b = self.reference_is_b
        code, text = self.verdict
        return {
            "schema": SCHEMA,
            "a": {"source": self.a_source, "predicted": self.a_predicted},
            "b": {"source": self.b_source, "predicted": self.b_predicted},
            "reference": "b" if ref_b else "a",
            "step_time": {
                **self.step_time.to_json(ref_b),
                "slowest_rank_a": self.slowest_rank_a,
                "slowest_rank_b": self.slowest_rank_b,
            },
            "ranks": [
                {
                    "rank": r.rank,
                    "a_device": r.a_device,
                    "b_device": r.b_device,
                    "steps_a": list(r.steps_a),
                    "steps_b": list(r.steps_b),
                    "step_alignment": r.step_alignment,
                    "step": r.step.to_json(ref_b),
                    "categories": {k: v.to_json(ref_b) for k, v in r.categories.items()},
                }
                for r in self.ranks
            ],
            "categories": {k: v.to_json(ref_b) for k, v in self.categories.items()},
            "kernels": [_item_json(k, ref_b) for k in self.kernels],
            "collectives": [_item_json(c, ref_b) for c in self.collectives],
            "verdict": {"code": code, "text": text, "tolerance_pct": self.tolerance_pct},
            "notes": list(self.notes),
            "kernel_similarity": _round(self.kernel_similarity),
            "warnings": list(self.warnings),
        }


def _signed(ns: int) -> str:
    return ("+" if ns >= 0 else "-") + format_duration(abs(ns))


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _item_json(item: ItemDiff, ref_b: bool) -> dict[str, Any]:
    return {
        "name": item.name,
        **item.time.to_json(ref_b),
        "a_count": round(item.a_count, 3),
        "b_count": round(item.b_count, 3),
    }


def kernel_class(name: str) -> str:
    """Kernel name without ``void``, template arguments and parameter list
    (:func:`~echo_view.analysis.cxx_names.qualified_base`); communication kernels become
    ``<library>:<collective>`` (``nccl:all_reduce``, ``deepep:all_to_all``)."""
    info = parse_comm_kernel_name(name)
    if info is not None:
        return f"{info.library}:{info.collective.label}"
    return qualified_base(name) or name


@dataclass(frozen=True, eq=False)
class _Side:
    """One rank of one job: its breakdown rows grouped per device."""

    trace: Trace
    bd: StepBreakdown

    @cached_property
    def _by_device(self) -> dict[int, npt.NDArray[np.intp]]:
        return dict(groups(self.bd.device))

    @cached_property
    def window_ns(self) -> I64:
        """The breakdown's computed step windows, computed once (read per device)."""
        return self.bd.window_ns

    def devices(self) -> list[int]:
        return list(self._by_device)

    def rows(self, device: int | None) -> I64:
        if device is None:
            return np.arange(len(self.bd))
        idx = self._by_device[device]
        return idx[np.argsort(self.bd.window_start_ns[idx], kind="stable")]


def _align_steps(a: _Side, ia: I64, b: _Side, ib: I64) -> tuple[I64, I64, str]:
    na, nb = a.bd.step[ia], b.bd.step[ib]
    if not a.bd.detected and not b.bd.detected:
        common = np.intersect1d(na, nb)
        if len(common):
            pa = ia[np.isin(na, common)]
            pb = ib[np.isin(nb, common)]
            return pa[np.argsort(a.bd.step[pa])], pb[np.argsort(b.bd.step[pb])], "number"
    n = min(len(ia), len(ib))
    return ia[:n], ib[:n], "order"


def _mean(values: I64) -> int:
    return round(float(values.mean())) if len(values) else 0


def _windows(side: _Side, rows: I64) -> tuple[I64, I64]:
    s, e = side.bd.window_start_ns[rows], side.bd.window_end_ns[rows]
    order = np.argsort(s)
    return s[order], e[order]


def _in_windows(t: npt.NDArray[np.integer[Any]], ws: I64, we: I64) -> npt.NDArray[np.bool_]:
    k = np.searchsorted(ws, t, side="right") - 1
    ok = k >= 0
    ok[ok] &= t[ok] < we[k[ok]]
    return ok


def _kernel_times(trace: Trace, ws: I64, we: I64) -> dict[str, tuple[int, int]]:
    """Kernel class -> (total ns, count) of kernels starting inside the windows."""
    ev = trace.events
    rows = np.flatnonzero(trace.mask(EventKind.KERNEL))
    rows = rows[_in_windows(ev.start_ns[rows], ws, we)]
    uniq, inv = np.unique(ev.name[rows], return_inverse=True)
    tot = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(tot, inv, ev.dur_ns[rows])
    cnt = np.bincount(inv, minlength=len(uniq))
    out: dict[str, tuple[int, int]] = {}
    for i, t, c in zip(uniq.tolist(), tot.tolist(), cnt.tolist(), strict=True):
        key = kernel_class(trace.strings[i])
        pt, pc = out.get(key, (0, 0))
        out[key] = (pt + t, pc + c)
    return out


def _collective_times(trace: Trace, ws: I64, we: I64) -> dict[str, tuple[int, int]]:
    """Collective class (``kind xN size``) -> (total GPU ns, count) inside the windows."""
    ev = trace.events
    ct = trace.collectives
    out: dict[str, tuple[int, int]] = {}
    gpu = np.isin(ev.kind[ct.event], [int(k) for k in GPU_KINDS])
    tabled = np.asarray(ct.event)
    for i in np.flatnonzero(gpu & _in_windows(ev.start_ns[ct.event], ws, we)).tolist():
        row = int(ct.event[i])
        g = int(ct.group[i])
        size = trace.groups[g].size if 0 <= g < len(trace.groups) else None
        key = _coll_key(CollectiveKind(int(ct.kind[i])), size, int(ct.bytes[i]))
        t, c = out.get(key, (0, 0))
        out[key] = (t + int(ev.dur_ns[row]), c + 1)
    work = gpu_work(trace)
    comm = work.rows[(work.labels == COMM) & ~np.isin(work.rows, tabled)]
    comm = comm[_in_windows(ev.start_ns[comm], ws, we)]
    for row in comm.tolist():
        info = parse_comm_kernel_name(trace.name(row))
        kind = info.collective if info is not None else CollectiveKind.UNKNOWN
        key = _coll_key(kind, None, -1)
        t, c = out.get(key, (0, 0))
        out[key] = (t + int(ev.dur_ns[row]), c + 1)
    return out


def _coll_key(kind: CollectiveKind, size: int | None, nbytes: int) -> str:
    parts = [kind.label]
    if size is not None:
        parts.append(f"x{size}")
    if nbytes >= 0:
        parts.append(_size_text(nbytes))
    return " ".join(parts)


def _size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _per_step(parts: list[tuple[int, int, int]]) -> tuple[float, float]:
    """Per-rank ``(total, count, steps)`` as per-step ``(time, count)`` summed over ranks."""
    return (
        sum(t / s for t, _, s in parts if s),
        sum(c / s for _, c, s in parts if s),
    )


def kernel_similarity(
    a: dict[str, list[tuple[int, int, int]]], b: dict[str, list[tuple[int, int, int]]]
) -> float | None:
    """Weighted Jaccard similarity of two jobs' GPU time per kernel class and step:
    ``sum(min(a_k, b_k)) / sum(max(a_k, b_k))`` over the classes ``k`` of either job. 1 means
    the same kernels for the same time, 0 no kernel class in common; ``None`` without kernels."""
    ta = {k: _per_step(v)[0] for k, v in a.items()}
    tb = {k: _per_step(v)[0] for k, v in b.items()}
    names = set(ta) | set(tb)
    union = sum(max(ta.get(k, 0.0), tb.get(k, 0.0)) for k in names)
    if union <= 0:
        return None
    return sum(min(ta.get(k, 0.0), tb.get(k, 0.0)) for k in names) / union


def _items(
    a: dict[str, list[tuple[int, int, int]]], b: dict[str, list[tuple[int, int, int]]], top: int
) -> list[ItemDiff]:
    """Merge per-rank ``(total, count, steps)`` into per-step sums; top ``top`` by |delta|."""
    items = []
    for name in set(a) | set(b):
        ta, ca = _per_step(a.get(name, []))
        tb, cb = _per_step(b.get(name, []))
        items.append(ItemDiff(name, Pair(round(ta), round(tb)), ca, cb))
    items.sort(key=lambda it: (-abs(it.time.delta_ns), -max(it.time.a_ns, it.time.b_ns), it.name))
    return items[:top]


def diff_jobs(
    a: Job, b: Job, *, top: int = 10, tolerance_pct: float = DEFAULT_TOLERANCE_PCT
) -> JobDiff:
    """Compare job ``a`` with job ``b`` (see the module docstring for the rules); a
    :class:`~echo_view.errors.UsageError` for a ``top`` that is not a whole number 0 or more
    or a ``tolerance_pct`` outside 0-1,000,000 (NaN included)."""
    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise UsageError(f"top must be a whole number 0 or more, got {top!r}")
    if (
        isinstance(tolerance_pct, bool)  # (True read as 1%)
        or not isinstance(tolerance_pct, int | float)
        or not 0 <= tolerance_pct <= 1e6
    ):
        raise UsageError(
            f"the tolerance must be a percentage from 0 to 1,000,000, got {tolerance_pct!r}"
        )
    notes: list[str] = []
    only_a = sorted(set(a.ranks) - set(b.ranks))
    only_b = sorted(set(b.ranks) - set(a.ranks))
    if only_a:
        notes.append(f"ranks only in A (left out): {only_a}")
    if only_b:
        notes.append(f"ranks only in B (left out): {only_b}")
    ranks: list[RankDiff] = []
    kern_a: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    kern_b: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    coll_a: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    coll_b: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for rank in sorted(set(a.ranks) & set(b.ranks)):
        ta, tb = a.trace(rank), b.trace(rank)
        sa, sb = _Side(ta, breakdown(ta)), _Side(tb, breakdown(tb))
        da: list[int | None] = list(sa.devices()) or [None]
        db: list[int | None] = list(sb.devices()) or [None]
        if len(da) != len(db):
            notes.append(f"rank {rank}: {len(da)} GPU(s) in A, {len(db)} in B; first pairs used")
        first_pair: tuple[I64, I64] | None = None
        for dev_a, dev_b in zip(da, db, strict=False):
            ia, ib, how = _align_steps(sa, sa.rows(dev_a), sb, sb.rows(dev_b))
            if not len(ia):
                notes.append(f"rank {rank}: no step to align")
                continue
            cats = {
                c: Pair(_mean(getattr(sa.bd, f"{c}_ns")[ia]), _mean(getattr(sb.bd, f"{c}_ns")[ib]))
                for c in CATEGORIES
            }
            ranks.append(
                RankDiff(
                    rank,
                    dev_a,
                    dev_b,
                    tuple(int(x) for x in sa.bd.step[ia]),
                    tuple(int(x) for x in sb.bd.step[ib]),
                    how,
                    Pair(_mean(sa.window_ns[ia]), _mean(sb.window_ns[ib])),
                    cats,
                )
            )
            if first_pair is None:
                first_pair = (ia, ib)
        if first_pair is None:
            continue
        ia, ib = first_pair
        wa, wb = _windows(sa, ia), _windows(sb, ib)
        for acc, times, n in (
            (kern_a, _kernel_times(ta, *wa), len(ia)),
            (kern_b, _kernel_times(tb, *wb), len(ib)),
            (coll_a, _collective_times(ta, *wa), len(ia)),
            (coll_b, _collective_times(tb, *wb), len(ib)),
        ):
            for name, (t, c) in times.items():
                acc[name].append((t, c, n))
    slow_a = max(ranks, key=lambda r: r.step.a_ns, default=None)
    slow_b = max(ranks, key=lambda r: r.step.b_ns, default=None)
    step_time = Pair(slow_a.step.a_ns if slow_a else 0, slow_b.step.b_ns if slow_b else 0)
    categories = {
        c: Pair(
            _mean(np.array([r.categories[c].a_ns for r in ranks], dtype=np.int64)),
            _mean(np.array([r.categories[c].b_ns for r in ranks], dtype=np.int64)),
        )
        for c in CATEGORIES
    }
    if any(r.step_alignment == "order" for r in ranks):
        notes.append("some steps were paired by order, not by step number")
    similarity = kernel_similarity(kern_a, kern_b)
    return JobDiff(
        a_source=a.source,
        b_source=b.source,
        a_predicted=a.predicted,
        b_predicted=b.predicted,
        ranks=ranks,
        step_time=step_time,
        slowest_rank_a=slow_a.rank if slow_a else None,
        slowest_rank_b=slow_b.rank if slow_b else None,
        categories=categories,
        kernels=_items(kern_a, kern_b, top),
        collectives=_items(coll_a, coll_b, top),
        tolerance_pct=tolerance_pct,
        notes=notes,
        kernel_similarity=similarity,
        warnings=_unrelated(a, b, similarity),
    )


def _unrelated(a: Job, b: Job, similarity: float | None) -> list[str]:
    """Why ``a`` and ``b`` look like different jobs (see the module docstring)."""
    why = []
    if len(a.ranks) != len(b.ranks):
        why.append(f"A has {len(a.ranks)} rank(s), B {len(b.ranks)}")
    if a.predicted == b.predicted and similarity is not None and similarity < UNRELATED_BELOW:
        why.append(
            f"their GPU time per kernel class is {similarity:.0%} alike (weighted Jaccard "
            f"similarity; warned below {UNRELATED_BELOW:.0%})"
        )
    if not why:
        return []
    return ["A and B look like different jobs: " + "; ".join(why) + "; the verdict compares "
            "unlike things"]  # fmt: skip


def _percent(value: float) -> str:
    """A percentage with one decimal, or two significant digits under 0.1 (``--tolerance 0``
    made a change of 0.028% read "0.0% slower")."""
    return f"{value:.2g}" if 0 < value < 0.1 else f"{value:.1f}"
