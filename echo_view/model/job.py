"""A :class:`Job`: the ranks of one run, on one aligned clock."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

from echo_view.model.trace import Trace

#: Most ranks a job may have (the largest real jobs have ~10^5 GPUs): a rank or world size
#: beyond it is damage, not a job.
MAX_RANKS = 1_000_000


def rank_problem(rank: object, world_size: object) -> str | None:
    """What is wrong with a recorded rank and world size (``None`` when either is absent or
    both are sound): integers with ``0 <= rank < world_size <= MAX_RANKS``."""
    ws = world_size if type(world_size) is int else None
    if ws is not None and not 1 <= ws <= MAX_RANKS:
        return f"world size {ws} is not between 1 and {MAX_RANKS:,}"
    if type(rank) is int and not 0 <= rank < (ws or MAX_RANKS):
        return f"rank {rank} is not between 0 and {(ws or MAX_RANKS) - 1:,}"
    return None


def group_ranks(value: object) -> tuple[int, ...] | None:
    """A process group's ranks as PyTorch records them: a list (``distributedInfo.pg_config``)
    or the text ``"[0, 1]"`` (``Process Group Ranks``). ``None`` when absent, or when any
    entry is not a rank (an integer ``0 <= r < MAX_RANKS``, or its decimal text)."""
    if isinstance(value, list):
        items: list[object] = value
    elif isinstance(value, str):
        text = value.strip().strip("[]")
        items = [v for v in text.replace(" ", "").split(",") if v] if text else []
    else:
        return None
    out: list[int] = []
    for v in items:
        if isinstance(v, str) and v.isascii() and v.isdigit() and len(v) <= 7:
            v = int(v)  # (7 digits: MAX_RANKS; int() of a long text is slow or refused)
        if type(v) is not int or not 0 <= v < MAX_RANKS:
            return None
        out.append(v)
    return tuple(out)


#: :attr:`ClockAlignment.method` of files that are not ranks of one run (they ran at different
#: times): the cross-rank rules do not apply to them.
SEPARATE_RUNS = "separate-runs"


@dataclass(frozen=True, slots=True)
class ClockAlignment:
    """How the ranks' clocks were put on one time axis.

    ``offsets_ns[i]`` is added to trace ``i``'s times to place it on the job's clock.
    ``uncertainty_ns`` bounds the remaining error of that placement; ``method`` names how it
    was obtained (``single-rank``, ``shared-host-clock``, ``collective-end``, ``wall-clock``,
    ``none``, or :data:`SEPARATE_RUNS`: files that did not run at the same time, each on its
    own clock).
    """

    method: str
    offsets_ns: tuple[int, ...]
    uncertainty_ns: int
    note: str = ""


@dataclass(frozen=True, eq=False)
class JobHead:
    """What a :class:`Job` says besides its traces' events: enough to report on a job read
    one rank at a time, each rank's events dropped once its own results are taken."""

    ranks: tuple[int, ...]
    alignment: ClockAlignment
    world_size: int | None
    source: str
    predicted: bool
    events: int
    meta: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Job:
    """All ranks of one training run (measured or predicted)."""

    traces: tuple[Trace, ...]
    alignment: ClockAlignment
    world_size: int | None = None
    source: str = ""
    predicted: bool = False
    meta: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ranks = [t.rank for t in self.traces]
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"a job holds each rank once, got ranks {ranks}")
        if ranks != sorted(ranks):
            order = sorted(range(len(ranks)), key=ranks.__getitem__)
            object.__setattr__(self, "traces", tuple(self.traces[i] for i in order))
            offsets = self.alignment.offsets_ns
            object.__setattr__(
                self,
                "alignment",
                ClockAlignment(
                    self.alignment.method,
                    tuple(offsets[i] for i in order),
                    self.alignment.uncertainty_ns,
                    self.alignment.note,
                ),
            )
        if len(self.alignment.offsets_ns) != len(self.traces):
            raise ValueError("alignment.offsets_ns needs one offset per trace")

    def __len__(self) -> int:
        return len(self.traces)

    def __iter__(self) -> Iterator[Trace]:
        return iter(self.traces)

    @property
    def ranks(self) -> tuple[int, ...]:
        """The ranks present, ascending."""
        return tuple(t.rank for t in self.traces)

    def index_of(self, rank: int) -> int:
        """Position of ``rank`` in :attr:`traces`."""
        try:
            return self._positions[rank]
        except KeyError:
            raise KeyError(f"rank {rank} is not in this job (ranks {list(self.ranks)})") from None

    # Worked out once: a job's traces and offsets are fixed, and callers ask per rank (a
    # 3,000-rank job made the TUI's index 9 million span computations before this).
    @cached_property
    def _positions(self) -> dict[int, int]:
        return {t.rank: i for i, t in enumerate(self.traces)}

    def trace(self, rank: int) -> Trace:
        """The trace of ``rank``."""
        return self.traces[self.index_of(rank)]

    def offset_ns(self, rank: int) -> int:
        """Clock offset that places ``rank`` on the job's clock."""
        return self.alignment.offsets_ns[self.index_of(rank)]

    def start_ns(self) -> int:
        """Earliest aligned event start over all ranks (the job's time origin)."""
        return self._start_ns

    @cached_property
    def _start_ns(self) -> int:
        starts = [
            t.span_ns()[0] + off
            for t, off in zip(self.traces, self.alignment.offsets_ns, strict=True)
            if len(t)
        ]
        return min(starts) if starts else 0

    @property
    def head(self) -> JobHead:
        """This job without its events."""
        return JobHead(
            self.ranks,
            self.alignment,
            self.world_size,
            self.source,
            self.predicted,
            self.event_count(),
            self.meta,
        )

    def event_count(self) -> int:
        """Total events over all ranks."""
        return sum(len(t) for t in self.traces)
