"""The collective catalogue: what each :class:`CollectiveKind` is, in one table.

Importers read a collective's name (PyTorch's c10d ops, ``record_param_comms``, NCCL's API and
kernels, nccl-tests programs); the communication model needs how its data moves; checks need
whether every rank of a group calls it alike; the interference model groups kinds. Each of those
is a column of :data:`COLLECTIVES`, so adding a kind is its enum value and one row, both here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class CollectiveKind(IntEnum):
    """Communication operations, NCCL's vocabulary."""

    ALL_REDUCE = 0
    ALL_GATHER = 1
    REDUCE_SCATTER = 2
    ALL_TO_ALL = 3
    BROADCAST = 4
    REDUCE = 5
    SEND = 6
    RECV = 7
    SEND_RECV = 8
    BARRIER = 9
    GATHER = 10
    SCATTER = 11
    UNKNOWN = 12

    @property
    def label(self) -> str:
        """Lower-case name (``all_reduce``)."""
        return self.name.lower()


#: How a collective's data moves.
#: ``ring``: every rank passes n-1 shares round a ring, ``passes`` times (all-reduce is a
#: reduce-scatter then an all-gather); ``chain``: a pipelined chain from or to a root (the data
#: crosses each link once); ``rooted``: a root exchanges a share with every peer; ``pairwise``:
#: one peer; ``all_to_all``: a share to every peer; ``sync``: no payload.
PATTERNS = ("ring", "chain", "rooted", "pairwise", "all_to_all", "sync", "unknown")


@dataclass(frozen=True)
class CollectiveInfo:
    """One collective kind's properties (see the module docstring)."""

    kind: CollectiveKind
    pattern: str
    #: NCCL's device-kernel function (``ncclDevKernel_<kernel>``); "" when NCCL has none.
    kernel: str = ""
    #: Other spellings in traces (lower case; "_"-free forms are matched too).
    aliases: tuple[str, ...] = ()
    #: nccl-tests program names (``<name>_perf``) and file-name fragments.
    nccl_tests: tuple[str, ...] = ()
    #: Ring passes (2 for all-reduce).
    passes: int = 1
    #: Combines values with a reduction operator.
    reduces: bool = False
    #: NCCL's tuner chooses algorithm and protocol from its tables.
    tuned: bool = False
    #: Every member of the group calls it with the same payload.
    matched: bool = False
    #: NCCL reports one rank's share (input of all-gather, output of reduce-scatter); the
    #: payload the model wants is that times the ranks.
    per_rank_payload: bool = False
    #: PyTorch's ``record_param_comms`` sizes it by its output (``Out msg nelems``): the
    #: gathered buffer of a gather, the received one of a recv; other kinds by their input.
    output_sized: bool = False
    #: Timed as another kind (a barrier as a one-element all-reduce); ``assumed`` says the
    #: result is a guess to report (an unknown collective).
    timed_as: CollectiveKind | None = None
    assumed: bool = False
    #: Group of the fitted interference model (``COMM_GROUPS`` in analysis.interference_fit).
    interference_group: str = "other"

    def bus_factor(self, nranks: int) -> float:
        """nccl-tests' busbw / algbw: ``passes * (n-1)/n`` on rings, ``(n-1)/n`` for
        all-to-all, gather and scatter (the root's own share does not cross a link), 1
        otherwise; a kind timed as another uses that kind's."""
        if self.timed_as is not None:
            return collective(self.timed_as).bus_factor(nranks)
        n = max(nranks, 1)
        if self.pattern == "ring":
            return self.passes * (n - 1) / n
        if self.pattern == "all_to_all" or self.kind in (_K.GATHER, _K.SCATTER):
            return (n - 1) / n
        return 1.0


_K = CollectiveKind
COLLECTIVES: tuple[CollectiveInfo, ...] = (
    CollectiveInfo(
        _K.ALL_REDUCE,
        "ring",
        "AllReduce",
        ("allreduce_coalesced", "all_reduce_coalesced"),
        ("all_reduce", "allreduce"),
        passes=2,
        reduces=True,
        tuned=True,
        matched=True,
        interference_group="all_reduce",
    ),
    CollectiveInfo(
        _K.ALL_GATHER,
        "ring",
        "AllGather",
        (
            "allgather_into_tensor",
            "allgather_into_tensor_coalesced",
            "allgather_coalesced",
            "_allgather_base",
            "all_gather_into_tensor",
            "all_gather_into_tensor_out",
            "all_gather_into_tensor_coalesced",
        ),
        ("all_gather", "allgather"),
        tuned=True,
        matched=True,
        per_rank_payload=True,
        output_sized=True,
        interference_group="all_gather",
    ),
    CollectiveInfo(
        _K.REDUCE_SCATTER,
        "ring",
        "ReduceScatter",
        (
            "reduce_scatter_tensor",
            "reduce_scatter_tensor_coalesced",
            "_reduce_scatter_base",
        ),
        ("reduce_scatter", "reducescatter"),
        reduces=True,
        tuned=True,
        matched=True,
        per_rank_payload=True,
        interference_group="reduce_scatter",
    ),
    # NCCL has no all-to-all function: it is grouped send/recv, run by the SendRecv kernel.
    CollectiveInfo(
        _K.ALL_TO_ALL,
        "all_to_all",
        "SendRecv",
        ("alltoallv", "alltoall_base", "all_to_all_single"),
        ("alltoall", "all_to_all"),
        interference_group="send_recv",
    ),
    CollectiveInfo(
        _K.BROADCAST,
        "chain",
        "Broadcast",
        ("bcast",),
        ("broadcast",),
        tuned=True,
        matched=True,
    ),
    CollectiveInfo(
        _K.REDUCE, "chain", "Reduce", (), ("reduce",), reduces=True, tuned=True, matched=True
    ),
    CollectiveInfo(_K.SEND, "pairwise", "SendRecv", interference_group="send_recv"),
    CollectiveInfo(
        _K.RECV, "pairwise", "SendRecv", output_sized=True, interference_group="send_recv"
    ),
    CollectiveInfo(
        _K.SEND_RECV, "pairwise", "SendRecv", (), ("sendrecv",), interference_group="send_recv"
    ),
    CollectiveInfo(_K.BARRIER, "sync", matched=True, timed_as=_K.ALL_REDUCE),
    CollectiveInfo(_K.GATHER, "rooted", "SendRecv", (), ("gather",), output_sized=True),
    CollectiveInfo(_K.SCATTER, "rooted", "SendRecv", (), ("scatter",)),
    CollectiveInfo(_K.UNKNOWN, "unknown", timed_as=_K.ALL_REDUCE, assumed=True),
)
_BY_KIND = {c.kind: c for c in COLLECTIVES}
if set(_BY_KIND) != set(CollectiveKind):
    raise AssertionError("every CollectiveKind needs a row in COLLECTIVES")


def collective(kind: CollectiveKind | int) -> CollectiveInfo:
    """The catalogue row of ``kind``."""
    return _BY_KIND[CollectiveKind(kind)]


def _spellings() -> dict[str, CollectiveKind]:
    out: dict[str, CollectiveKind] = {}
    for c in COLLECTIVES:
        if c.kind == _K.UNKNOWN:
            continue
        label = c.kind.label
        for name in {label, label.replace("_", ""), *c.aliases, *c.nccl_tests}:
            if out.setdefault(name, c.kind) != c.kind:
                raise AssertionError(f"collective spelling {name!r} names two kinds")
    return out


_SPELLINGS = _spellings()
# nccl-tests names, longest first, so that ``reduce_scatter`` wins over ``reduce``.
_TEST_NAMES = sorted(
    ((name, c.kind) for c in COLLECTIVES for name in c.nccl_tests),
    key=lambda item: -len(item[0]),
)


def collective_kind_from_name(name: str) -> CollectiveKind:
    """Map a collective name as written by PyTorch or NCCL (``allreduce``, ``AllGather``,
    ``reduce_scatter_tensor``, ``all_to_all``, ``nccl:broadcast``) to a :class:`CollectiveKind`
    (``UNKNOWN`` when it is none of them)."""
    key = name.strip().lower().removeprefix("nccl:").removeprefix("c10d::")
    key = key.removesuffix("_")
    if key in _SPELLINGS:
        return _SPELLINGS[key]
    return _SPELLINGS.get(key.replace("_", ""), CollectiveKind.UNKNOWN)


def collective_in_text(text: str) -> CollectiveKind | None:
    """The collective an nccl-tests program or log file name names (``all_gather_perf``,
    ``allreduce_8gpu.log``), ``None`` when it names none."""
    low = text.lower()
    for name, kind in _TEST_NAMES:
        if name in low:
            return kind
    return None
