"""The discrete-event engine: ops, dependencies and collectives in, start and end times out.

The engine is a single loop over one heap of op-completion events keyed ``(t_ns, priority,
seq)`` — ``seq`` is the op id, so equal times resolve the same way on every run; the key is
packed into one integer, which the heap compares about twice as fast as a tuple. An op is
scheduled the moment its last dependency resolves: its start is the latest release its
dependencies impose, its end ``start + duration`` (or later when an end-to-end dependency holds
it, as a host sync is held by the GPU work it waits for). A collective's participants are
scheduled together once the last of them is ready: they all end at ``last ready + transfer
time``; each participant's op begins at its own ready time, as a real NCCL kernel occupies its
stream while it waits for its peers.

Hot-path notes. Columns are turned into flat Python lists once; the loop touches only ints,
lists and the heap (no per-op objects). Successor edges are stored as one list of release-slot
indices (slot ``j`` constrains op ``j``'s start, slot ``n + j`` its end) so one branch-free loop
handles every edge kind. Chains are coarsened where that is exact: when the only edge leaving an
op's end goes to an op with no other predecessor, that op is timed inline, without a heap round
trip. This covers a CPU thread's calls between two host syncs (a launch resolves its kernel when
it starts, so its end has one successor, the next call) and runs of kernels with no outside
dependency (a traced graph). It stays exact because the engine has no resource contention: an
op's duration does not depend on what runs beside it. A cost model that made it depend
(interference) would have to turn it off (``coarsen=False``). Interference is such a model, and
turns it off exactly where it applies: with a rate hook
(:class:`~echo_view.sim.interference.rates.RateHook`, protocol in its module) the ops it pins —
compute ops that communication on their GPU can slow, and that communication — are never
chained; a pinned compute op's end comes from the hook when communication known on its GPU
reaches it, and moves when communication there starts or ends (superseded heap entries are
skipped); every other op runs, and is chained, as before.

The engine does no I/O, keeps no global state and uses no randomness.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from echo_view.errors import SimulationError
from echo_view.model.kinds import LaneKind
from echo_view.model.trace import NONE
from echo_view.model.workload import DepMode, Workload
from echo_view.sim.result import SimResult
from echo_view.units import NS_LIMIT

if TYPE_CHECKING:
    from echo_view.sim.interference.rates import RateHook

I64 = npt.NDArray[np.integer[Any]]


def run(
    workload: Workload,
    dur_ns: npt.ArrayLike,
    coll_dur_ns: npt.ArrayLike,
    gap_ns: npt.ArrayLike | None = None,
    *,
    coarsen: bool = True,
    rates: RateHook | None = None,
) -> SimResult:
    """Simulate ``workload`` with op durations ``dur_ns`` and collective transfer times
    ``coll_dur_ns`` (one per collective row); ``gap_ns`` replaces the workload's lane gaps when
    given. ``coarsen=False`` turns chain coarsening off (for comparison; results are equal).
    ``rates`` applies interference (see the module docstring); ``dur_ns`` are then solo times.
    Raises
    :class:`~echo_view.errors.SimulationError` when a collective can never complete or the
    dependencies form a cycle."""
    n = len(workload)
    dur = np.asarray(dur_ns, dtype=np.int64)
    cdur = np.asarray(coll_dur_ns, dtype=np.int64)
    if len(dur) != n:
        raise ValueError(f"dur_ns has {len(dur)} values for {n} ops")
    if len(cdur) != len(workload.collectives):
        raise ValueError(f"coll_dur_ns has {len(cdur)} values for {len(workload.collectives)}")
    gaps = workload.ops.gap_ns if gap_ns is None else np.asarray(gap_ns, dtype=np.int64)
    if len(gaps) != n:
        raise ValueError("gap_ns needs one value per op")
    check_durations(dur, cdur, gaps)
    parts_ptr, parts = _participants(workload)
    _check_collectives_complete(workload, parts_ptr, parts)
    hook = rates if rates is not None and rates.active else None
    graph = _Graph(workload, gaps, coarsen, None if hook is None else hook.pinned)
    start, end, cstart, cend, done = _loop(workload, graph, dur, cdur, parts_ptr, parts, hook)
    if done < n:
        raise _stuck(workload, start, parts_ptr, parts, cstart)
    return SimResult(
        start_ns=np.asarray(start, dtype=np.int64),
        end_ns=np.asarray(end, dtype=np.int64),
        coll_start_ns=np.asarray(cstart, dtype=np.int64),
        coll_end_ns=np.asarray(cend, dtype=np.int64),
        dur_ns=dur,
        coll_dur_ns=cdur,
        gap_ns=gaps,
    )


class _Graph:
    """Successor lists of every op, lane order included, as flat lists for the loop.

    An edge resolves a *slot*: slot ``j`` is op ``j``'s start, slot ``n + j`` its end (an
    end-to-end dependency). Each slot counts the edges it still waits for.
    """

    def __init__(
        self,
        wl: Workload,
        gaps: I64,
        coarsen: bool = True,
        pinned: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        n = len(wl)
        ops, deps = wl.ops, wl.deps
        # Lane order: consecutive ops (by id) on one lane, end -> start with the op's gap.
        order = np.lexsort((np.arange(n), ops.lane)) if n else np.empty(0, dtype=np.int64)
        same = ops.lane[order[1:]] == ops.lane[order[:-1]] if n else np.empty(0, dtype=bool)
        lane_src = order[:-1][same]
        lane_dst = order[1:][same]
        dep_dst = deps.dst().astype(np.int64)
        src = np.concatenate([lane_src, deps.src.astype(np.int64)])
        dst = np.concatenate([lane_dst, dep_dst])
        mode = np.concatenate([np.zeros(len(lane_src), dtype=np.int64), deps.mode])
        lag = np.concatenate([gaps[lane_dst], deps.lag_ns])
        to_end = mode == int(DepMode.END_TO_END)
        if np.any(to_end & (ops.coll[dst] >= 0)):
            k = int(np.flatnonzero(to_end & (ops.coll[dst] >= 0))[0])
            raise SimulationError(
                f"a collective's op cannot wait end-to-end: {wl.op_label(int(dst[k]))}",
                where="deps",
            )
        slot = dst + np.where(to_end, n, 0)
        self.count = np.bincount(slot, minlength=2 * n).astype(np.int64)
        from_start = mode == int(DepMode.START_TO_START)
        self.start_ptr, self.start_slot, self.start_lag = _csr(
            n, src[from_start], slot[from_start], lag[from_start]
        )
        on_end = ~from_start
        self.end_ptr, self.end_slot, self.end_lag = _csr(n, src[on_end], slot[on_end], lag[on_end])
        # Coarsening: i -> j is a chain link when it is the only edge leaving i's end and the
        # only edge into j, it is end -> start, and neither op takes part in a collective.
        # (Edges leaving i's start are resolved when i starts, before the link is followed.)
        indeg = np.bincount(dst, minlength=n) if n else np.zeros(0, dtype=np.int64)
        outdeg = np.bincount(src[on_end], minlength=n) if n else np.zeros(0, dtype=np.int64)
        chain = np.full(n, -1, dtype=np.int64)
        chain_lag = np.zeros(n, dtype=np.int64)
        link = (
            (mode == int(DepMode.END_TO_START))
            & (outdeg[src] == 1)
            & (indeg[dst] == 1)
            & (ops.coll[src] < 0)
            & (ops.coll[dst] < 0)
            & coarsen
        )
        if pinned is not None:
            link &= ~pinned[src] & ~pinned[dst]
        chain[src[link]] = dst[link]
        chain_lag[src[link]] = lag[link]
        self.chain = chain
        self.chain_lag = chain_lag
        self.chained = int(link.sum())


def _csr(n: int, src: I64, slot: I64, lag: I64) -> tuple[list[int], list[int], list[int]]:
    order = np.argsort(src, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    if len(src):
        np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    return ptr.tolist(), slot[order].tolist(), lag[order].tolist()


#: What to do about durations past :func:`check_durations`' bound, by default.
DURATIONS_HINT = "lower --set compute.scale.* / comm.scale, or check the input's durations"


def check_durations(
    *columns: npt.NDArray[np.integer[Any]], hint: str = DURATIONS_HINT, path: str | None = None
) -> None:
    """Every duration and gap is at least 0, and all of them together stay within
    :data:`~echo_view.units.NS_LIMIT` (146 years), so that no time the schedule adds up can
    overflow int64. Past it lies a scale factor, a model size or an input duration no step
    has."""
    total = sum(float(c.sum(dtype=np.float64)) for c in columns)
    if any(len(c) and c.min() < 0 for c in columns) or not total < NS_LIMIT:
        raise SimulationError(
            "the op durations (with their scale factors) add up to more than 146 years, or "
            "one of them is out of range",
            path=path,
            hint=hint,
        )


def _participants(wl: Workload) -> tuple[list[int], list[int]]:
    """Participant ops of each collective, as compressed rows (ops in id order)."""
    m = len(wl.collectives)
    coll = wl.ops.coll
    ids = np.flatnonzero(coll >= 0)
    order = ids[np.argsort(coll[ids], kind="stable")]
    ptr = np.zeros(m + 1, dtype=np.int64)
    if len(ids):
        np.cumsum(np.bincount(coll[ids], minlength=m), out=ptr[1:])
    return ptr.tolist(), order.tolist()


def _check_collectives_complete(wl: Workload, ptr: list[int], parts: list[int]) -> None:
    """Every rank of a collective's group that is in the workload must take part exactly once;
    ranks of the group that are absent from the workload altogether are taken to arrive on
    time (a job traced on a subset of its ranks)."""
    present = set(wl.ranks)
    rank = wl.ops.rank
    for c in range(len(wl.collectives)):
        have = [int(rank[p]) for p in parts[ptr[c] : ptr[c + 1]]]
        if not have:
            continue
        if len(set(have)) != len(have):
            dup = sorted({r for r in have if have.count(r) > 1})
            raise SimulationError(
                f"collective {wl.collective_label(c)} has two ops on rank(s) {dup}",
                where=f"collectives[{c}]",
                hint="each rank takes part in one collective once",
            )
        group = wl.groups[int(wl.collectives.group[c])]
        missing = sorted((set(group.ranks) & present) - set(have))
        if missing:
            raise SimulationError(
                f"collective {wl.collective_label(c)} never completes: "
                f"rank(s) {_ranks_text(missing)} never arrive (arrived: {_ranks_text(have)})",
                where=f"collectives[{c}]",
                hint="those ranks issue no matching collective; check that every rank runs "
                "the same collectives in the same order",
            )


def _loop(
    wl: Workload,
    g: _Graph,
    dur_a: I64,
    cdur_a: I64,
    parts_ptr: list[int],
    parts: list[int],
    hook: RateHook | None = None,
) -> tuple[list[int], list[int], list[int], list[int], int]:
    n = len(wl)
    m = len(wl.collectives)
    dur = dur_a.tolist()
    cdur = cdur_a.tolist()
    coll = wl.ops.coll.tolist()
    # Releases: slot j = earliest start of op j, slot n + j = earliest end.
    rel: list[int] = np.maximum(wl.ops.release_ns, 0).tolist() + [0] * n
    count: list[int] = g.count.tolist()
    end_wait: list[bool] = (g.count[n:] > 0).tolist()
    # Heap entries are single ints t * 2n + priority * n + op, ordered like the tuple
    # (t_ns, priority, op) but compared faster; GPU work (priority 0) completes before CPU
    # work (priority 1) at equal times.
    span = 2 * n
    key: list[int] = []
    if n:
        kinds = np.array([int(lane.kind) for lane in wl.lanes], dtype=np.int64)
        gpu = kinds[wl.ops.lane] == int(LaneKind.GPU_STREAM)
        key = np.where(gpu, np.arange(n), np.arange(n) + n).tolist()
    sp, sslot, slag = g.start_ptr, g.start_slot, g.start_lag
    ep, eslot, elag = g.end_ptr, g.end_slot, g.end_lag
    chain: list[int] = g.chain.tolist()
    chain_lag: list[int] = g.chain_lag.tolist()
    expected = [parts_ptr[c + 1] - parts_ptr[c] for c in range(m)]
    arrived = [0] * m
    cready = [0] * m
    start = [NONE] * n
    end = [NONE] * n
    cstart = [NONE] * m
    cend = [NONE] * m
    heap: list[int] = []
    push = heapq.heappush
    pop = heapq.heappop
    # Ready slots: x < n means op x can start; x >= n means op x - n's end constraints are met.
    ready = [i for i in range(n - 1, -1, -1) if count[i] == 0]
    take = ready.pop
    put = ready.append
    done = 0
    # Interference (see the module docstring). role: 1 rated op, 2 communication op, else 0.
    role: list[int] = []
    op_dev: list[int] = []
    op_lane: list[int] = []
    reach: list[float] = []
    last: list[int] = []
    ended: list[bool] = []
    if hook is not None:
        hook.bind(start, end)
        role, op_dev, op_lane = hook.role, hook.op_dev, hook.op_lane
        reach, last = hook.reach, hook.last
        ended = [False] * n
    t = 0  # time of the latest heap entry taken

    def requeue(moved: list[tuple[int, int]]) -> None:
        for p, e2 in moved:
            end[p] = e2
            push(heap, e2 * span + key[p])

    while True:
        while ready:
            i = take()
            if i >= n:
                # End constraints met: finish the op if it has started already.
                i -= n
                s = start[i]
                if s == NONE or end[i] != NONE:
                    continue  # not started yet (it finishes when it starts) or finished
                e = s + dur[i]
                if rel[n + i] > e:
                    e = rel[n + i]
                end[i] = e
                done += 1
                push(heap, e * span + key[i])
                continue
            s = rel[i]
            start[i] = s
            a, b = sp[i], sp[i + 1]
            if a != b:
                for k in range(a, b):
                    r = s + slag[k]
                    x = sslot[k]
                    if r > rel[x]:
                        rel[x] = r
                    count[x] -= 1
                    if count[x] == 0:
                        put(x)
            c = coll[i]
            if c >= 0:
                if s > cready[c]:
                    cready[c] = s
                if hook is not None and role[i] and (moved := hook.comm_open(i, s, None, t)):
                    requeue(moved)
                arrived[c] += 1
                if arrived[c] < expected[c]:
                    continue
                t0 = cready[c]
                e = t0 + cdur[c]
                cstart[c] = t0
                cend[c] = e
                for p in parts[parts_ptr[c] : parts_ptr[c + 1]]:
                    end[p] = e
                    push(heap, e * span + key[p])
                    if hook is not None and role[p] and (moved := hook.comm_close(p, e, t)):
                        requeue(moved)
                done += expected[c]
                continue
            e = s + dur[i]
            if end_wait[i]:
                if count[n + i]:
                    continue  # a blocked call: it ends when what it waits for has ended
                if rel[n + i] > e:
                    e = rel[n + i]
            if hook is not None and role[i]:
                if role[i] == 1:
                    last[op_lane[i]] = i
                    if reach[op_dev[i]] > s:  # communication known on its GPU reaches it
                        e = hook.begin(i, s)
                elif moved := hook.comm_open(i, s, e, t):
                    requeue(moved)
            end[i] = e
            done += 1
            j = chain[i]
            while j >= 0:
                # Exact inline timing of a chain link (see the module docstring).
                s = e + chain_lag[i]
                if rel[j] > s:
                    s = rel[j]
                start[j] = s
                a, b = sp[j], sp[j + 1]
                if a != b:
                    for k in range(a, b):
                        r = s + slag[k]
                        x = sslot[k]
                        if r > rel[x]:
                            rel[x] = r
                        count[x] -= 1
                        if count[x] == 0:
                            put(x)
                e = s + dur[j]
                end[j] = e
                done += 1
                i = j
                j = chain[i]
            push(heap, e * span + key[i])
        if not heap:
            break
        t, i = divmod(pop(heap), span)
        if i >= n:
            i -= n
        if hook is not None and role[i] == 1:
            if end[i] != t or ended[i]:
                continue  # superseded: the op's end moved
            ended[i] = True
        for k in range(ep[i], ep[i + 1]):
            r = t + elag[k]
            x = eslot[k]
            if r > rel[x]:
                rel[x] = r
            count[x] -= 1
            if count[x] == 0:
                put(x)
    return start, end, cstart, cend, done


def _stuck(
    wl: Workload, start: list[int], ptr: list[int], parts: list[int], cstart: list[int]
) -> SimulationError:
    """The error for a simulation that stopped with ops left: a collective some ranks never
    reached (named, with who arrived), or else a dependency cycle."""
    rank = wl.ops.rank
    best: tuple[int, int] | None = None
    for c in range(len(wl.collectives)):
        if cstart[c] != NONE:
            continue
        arrived = [start[p] for p in parts[ptr[c] : ptr[c + 1]] if start[p] != NONE]
        if arrived and (best is None or min(arrived) < best[0]):
            best = (min(arrived), c)
    if best is not None:
        c = best[1]
        members = parts[ptr[c] : ptr[c + 1]]
        came = sorted(int(rank[p]) for p in members if start[p] != NONE)
        never = sorted(int(rank[p]) for p in members if start[p] == NONE)
        return SimulationError(
            f"collective {wl.collective_label(c)} never completes: rank(s) "
            f"{_ranks_text(never)} never arrive (arrived: {_ranks_text(came)})",
            where=f"collectives[{c}]",
            hint="those ranks wait on something that waits on this collective; check that "
            "every rank issues its collectives in the same order",
        )
    left = [i for i in range(len(wl)) if start[i] == NONE]
    return SimulationError(
        f"{len(left)} op(s) never become ready, e.g. {wl.op_label(left[0])}",
        where=f"ops[{left[0]}]",
        hint="the dependencies form a cycle",
    )


def _ranks_text(ranks: list[int] | Any) -> str:
    ranks = list(ranks)
    if len(ranks) > 12:
        return ", ".join(str(r) for r in ranks[:12]) + f", ... ({len(ranks)} in all)"
    return ", ".join(str(r) for r in ranks)
