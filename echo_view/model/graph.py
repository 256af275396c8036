"""The traced execution graph of a model's ranks, obtained ex-situ (no cluster, no GPU).

A :class:`TracedGraph` holds one :class:`Role` per distinct rank role of a parallel layout (a
pipeline stage's model chunk: first stage with the embedding, last stage with the loss, middle
stages). Each role holds op sequences per phase — one micro-batch's ``forward`` and ``backward``
of one model chunk, and the step's ``optimizer`` — in program order on the rank's compute
stream. Collectives appear in that order too, carrying their kind, bytes and the parallel axis
of their group (``tp``, ``dp``, ``pp``, ``cp``); the simulator maps an axis to concrete ranks.

Ops are stored as columns (:class:`OpTable`) so a graph with millions of ops stays compact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.columns import check_lengths, frozen
from echo_view.model.kinds import CollectiveKind
from echo_view.model.strings import StringTable

#: Version of the traced-graph schema; bump on any incompatible change.
GRAPH_SCHEMA_VERSION = 1

PHASES = ("forward", "backward", "optimizer")
#: The columns of an :class:`OpTable` and their stored dtypes, in file order.
OP_COLUMNS: dict[str, str] = {
    "name": "i4",
    "op_class": "u1",
    "flops": "f8",
    "bytes": "i8",
    "dtype": "i4",
    "shapes": "i4",
    "coll_kind": "i1",
    "coll_bytes": "i8",
    "axis": "i1",
    "grad_bytes": "i8",
    "stream": "i1",
    "wait": "i8",
}
#: Columns a stored graph may omit, with the value every op then has (graphs of one stream).
OPTIONAL_COLUMNS: dict[str, int] = {"stream": 0, "wait": -1}
#: Parallel axes a collective's group can run over (stored by index: new ones go at the end).
AXES = ("tp", "dp", "pp", "cp", "none", "ep", "etp", "edp", "etp_ep", "tp_cp")


class OpClass:
    """Kernel classes used by the cost and interference models (stored as uint8)."""

    GEMM = 0
    ATTENTION = 1
    ELEMENTWISE = 2
    REDUCTION = 3
    NORMALIZATION = 4
    EMBEDDING = 5
    OPTIMIZER = 6
    COPY = 7
    OTHER = 8
    COLLECTIVE = 9
    NAMES = (
        "gemm",
        "attention",
        "elementwise",
        "reduction",
        "normalization",
        "embedding",
        "optimizer",
        "copy",
        "other",
        "collective",
    )


def shapes_text(shapes: list[list[int]]) -> str:
    """The ``shapes`` column's text for tensor-argument shapes: ``"[4096,12288]x[12288,1536]"``."""
    return "x".join("[" + ",".join(str(int(d)) for d in s) + "]" for s in shapes)


def parse_shapes_text(text: str) -> list[tuple[int, ...]] | None:
    """The shapes in a ``shapes`` column's text, ``None`` when it is not that format."""
    if not text:
        return None
    out: list[tuple[int, ...]] = []
    for part in text.split("x"):
        if not (part.startswith("[") and part.endswith("]")):
            return None
        inner = part[1:-1]
        try:
            out.append(tuple(int(d) for d in inner.split(",")) if inner else ())
        except ValueError:
            return None
    return out


@dataclass(frozen=True, eq=False)
class OpTable:
    """One phase's ops in program order.

    ``op_class`` is an :class:`OpClass`; ``flops`` and ``bytes`` are the work of compute ops
    (bytes = tensor bytes read + written); ``dtype`` and ``shapes`` are string ids (shapes as
    text such as ``"[4096,12288]x[12288,1536]"``). For collectives (``op_class`` COLLECTIVE)
    ``coll_kind`` is a :class:`~echo_view.model.kinds.CollectiveKind`, ``coll_bytes`` the
    per-rank payload and ``axis`` an index into :data:`AXES`; elsewhere they are -1.
    ``grad_bytes`` marks where parameter gradients become ready in backward (bytes of gradients
    completed at that op), which drives data-parallel bucketing; 0 elsewhere.

    ``stream`` is the GPU stream an op runs on: 0 the compute (default) stream, 1, 2, ... the
    other streams of the traced step in order of creation (a collective's is its process
    group's communication stream). A row whose ``wait`` is set is no kernel but a stream wait
    (``cudaStreamWaitEvent``): the ops after it on its stream start after op ``wait`` has
    ended, ``wait`` being a step-wide index (the forward's rows, then the backward's, then the
    optimizer's; the latest run of that op when passes repeat). Graphs whose ops all run on one
    stream (the built-in tracer's) have ``stream`` 0 and ``wait`` -1 everywhere.
    """

    name: npt.NDArray[np.integer[Any]]
    op_class: npt.NDArray[np.integer[Any]]
    flops: npt.NDArray[np.floating[Any]]
    bytes: npt.NDArray[np.integer[Any]]
    dtype: npt.NDArray[np.integer[Any]]
    shapes: npt.NDArray[np.integer[Any]]
    coll_kind: npt.NDArray[np.integer[Any]]
    coll_bytes: npt.NDArray[np.integer[Any]]
    axis: npt.NDArray[np.integer[Any]]
    grad_bytes: npt.NDArray[np.integer[Any]]
    # Optional (OPTIONAL_COLUMNS): None gives every op the column's default.
    stream: npt.NDArray[np.integer[Any]] = None  # type: ignore[assignment]
    wait: npt.NDArray[np.integer[Any]] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        for name, value in OPTIONAL_COLUMNS.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.full(len(self.name), value))
        cols = {name: frozen(getattr(self, name), dt) for name, dt in OP_COLUMNS.items()}
        check_lengths("ops", cols)
        for name, col in cols.items():
            object.__setattr__(self, name, col)

    def __len__(self) -> int:
        return len(self.name)

    @property
    def streams_used(self) -> bool:
        """Whether any op runs off the compute stream or waits for another stream."""
        return bool(len(self)) and bool(self.stream.any() or (self.wait >= 0).any())

    def collective_rows(self) -> npt.NDArray[np.intp]:
        """Rows that are collectives."""
        return np.flatnonzero(self.op_class == OpClass.COLLECTIVE)

    def coll(self, row: int) -> CollectiveKind:
        """Collective kind of row ``row``."""
        return CollectiveKind(int(self.coll_kind[row]))


@dataclass(frozen=True, eq=False)
class Role:
    """One distinct rank role: the pipeline stages that behave alike and their op sequences.

    ``stages`` lists the pipeline stages this role stands for (stage 0 holds the embedding, the
    last stage the loss; the stages between are identical). ``forward[c]`` / ``backward[c]`` are
    one micro-batch of the rank's model chunk ``c`` (one chunk per virtual stage, in order);
    ``optimizer`` runs once per step. ``params`` counts this rank's parameters and
    ``grad_dtype_bytes`` the bytes of one gradient element (data-parallel reduction).
    """

    stages: tuple[int, ...]
    forward: tuple[OpTable, ...]
    backward: tuple[OpTable, ...]
    optimizer: OpTable
    params: int
    grad_dtype_bytes: int = 4


@dataclass(frozen=True, eq=False)
class TracedGraph:
    """All roles of one workload, with the strings they refer to and the config they came from."""

    strings: StringTable
    roles: tuple[Role, ...]
    config: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    schema_version: int = GRAPH_SCHEMA_VERSION

    def role_for_stage(self, stage: int) -> Role:
        """The role that runs pipeline ``stage``."""
        for role in self.roles:
            if stage in role.stages:
                return role
        raise KeyError(f"no traced role for pipeline stage {stage}")

    def rows_named(self, table: OpTable, name: str) -> npt.NDArray[np.bool_]:
        """Which rows of ``table`` are op ``name`` (none when the graph never names it)."""
        sid = self.strings.id_of(name)
        if sid is None:
            return np.zeros(len(table), dtype=np.bool_)
        return np.asarray(table.name == sid, dtype=np.bool_)

    def op_count(self) -> int:
        """Total ops over all roles and phases."""
        n = 0
        for r in self.roles:
            n += sum(len(t) for t in r.forward) + sum(len(t) for t in r.backward)
            n += len(r.optimizer)
        return n
