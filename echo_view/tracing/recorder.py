"""Record the aten ops a torch program dispatches, with shapes, dtypes, FLOPs and bytes.

:class:`Recorder` is a ``TorchDispatchMode``: every op that reaches the dispatcher (forward,
autograd's backward, recomputation) is appended to the current phase's columns. Collectives are
not aten ops here — the parallel layers call :meth:`Recorder.collective` at the point where
Megatron would launch them, so they land in program order between the compute ops.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten

from echo_view.model.aten_ops import (
    ACCUMULATES,
    ALLOCATING,
    DETERMINISTIC_FILL,
    FUSED_OPTIMIZERS,
    HOST_WAIT,
    INDEXED_READS,
    INDEXED_WRITES,
    NO_KERNEL,
    OVERWRITES,
    SDPA,
    attention_flops,
    elementwise_flops,
    gemm_dims,
    op_class,
)
from echo_view.model.collectives import collective_kind_from_name
from echo_view.model.columns import ColumnBuilder
from echo_view.model.config import WorkloadConfig
from echo_view.model.dtypes import short_dtype
from echo_view.model.graph import AXES, OP_COLUMNS, OpClass, OpTable, shapes_text
from echo_view.model.kinds import CollectiveKind
from echo_view.model.strings import StringTable


def dtype_name(dtype: torch.dtype) -> str:
    """Short dtype name (``bf16``)."""
    return short_dtype(str(dtype)) or str(dtype).removeprefix("torch.")


def storage_of(t: torch.Tensor) -> StorageWeakRef:
    """The memory ``t`` views (equal for every view of one buffer)."""
    return StorageWeakRef(t.untyped_storage())  # type: ignore[no-untyped-call]


def _nbytes(t: torch.Tensor) -> int:
    return int(t.numel()) * t.element_size()


#: Namespaces of the dispatcher ops that run collectives: the process-group ops behind
#: ``torch.distributed`` (DDP, FSDP2) and the functional collectives (DTensor).
C10D_NAMESPACES = ("c10d", "_c10d_functional")
#: Dispatcher collectives that launch no communication kernel.
C10D_NO_KERNEL = frozenset({"wait_tensor", "monitored_barrier_"})
#: Collectives whose payload is the output (the gathered buffer), not the input.
_OUTPUT_PAYLOAD = frozenset({CollectiveKind.ALL_GATHER})


class UnsupportedCollective(RuntimeError):
    """A dispatcher collective the catalogue does not know."""


def group_ranks(args: Sequence[Any]) -> tuple[int, ...]:
    """The global ranks of the process group a c10d / functional collective runs in."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group  # type: ignore[attr-defined]

    for a in args:
        if isinstance(a, torch.ScriptObject):
            pg = torch._C._distributed_c10d.ProcessGroup.unbox(a)
            return tuple(dist.get_process_group_ranks(pg))
    for a in reversed(args):  # functional collectives name their group last
        if isinstance(a, str):
            group = _resolve_process_group(a)  # type: ignore[arg-type]
            return tuple(dist.get_process_group_ranks(group))
    return tuple(range(dist.get_world_size()))


@dataclass(frozen=True, slots=True)
class Fills:
    """Deterministic algorithms' fills of new buffers (Megatron-LM's ``--deterministic-mode``,
    ``[training] deterministic``): every buffer an op takes from ATen's allocation functions
    is first written with NaN by a kernel of its own (:data:`ALLOCATING`, and what
    :meth:`Recorder.library` marks). ``te``: the layers are Transformer Engine's, whose GEMM
    outputs and attention-score buffers are such allocations (``[model] transformer_impl``);
    Megatron's local layers run PyTorch's GEMMs and reuse a preallocated score buffer.
    ``wgrad_fused``: the weight-gradient GEMMs accumulate into ``main_grad`` and allocate
    nothing (``gradient_accumulation_fusion``)."""

    te: bool
    wgrad_fused: bool = False

    @classmethod
    def of(cls, cfg: WorkloadConfig) -> Fills | None:
        """What ``cfg``'s training fills (``None``: no deterministic algorithms)."""
        if not cfg.training.deterministic:
            return None
        return cls(
            te=cfg.model.transformer_impl == "transformer_engine",
            wgrad_fused=cfg.training.gradient_accumulation_fusion,
        )


class Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Collects ops into per-phase :class:`OpTable` columns; with :attr:`fills`, each op's
    allocation fills as rows of their own before it."""

    def __init__(self, strings: StringTable, fills: Fills | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.strings = strings
        self._cols: ColumnBuilder | None = None
        self.enabled = True
        self.fills = fills
        self._library = 0
        self._gemm_dtype: str | None = None
        #: ``(row, group ranks)`` of each dispatcher collective in the current op sequence,
        #: for the caller to map groups onto parallel axes (:meth:`end` keeps the last list).
        self.groups: list[tuple[int, tuple[int, ...]]] = []
        # One tuple object per distinct group, shared by its collectives: a program pickles
        # each group once (a data-parallel group at --world 1,000,000 is 1 M ranks).
        self._group_tuples: dict[tuple[int, ...], tuple[int, ...]] = {}

    @contextmanager
    def gemm_dtype(self, name: str) -> Iterator[None]:
        """Record the GEMMs dispatched inside as running in ``name`` (FP8 GEMMs compute on
        quantized copies of bf16 tensors, which the meta device cannot hold)."""
        previous, self._gemm_dtype = self._gemm_dtype, name
        try:
            yield
        finally:
            self._gemm_dtype = previous

    # -- phases -------------------------------------------------------------------------
    def begin(self) -> None:
        """Start a new op sequence (a phase of one chunk)."""
        self._cols = ColumnBuilder(OP_COLUMNS)
        self.groups = []

    def end(self) -> OpTable:
        """Finish the current op sequence and return it."""
        if self._cols is None:
            raise RuntimeError("Recorder.end() without begin()")
        table = OpTable(**self._cols.columns())
        self._cols = None
        return table

    def _row(self, **row: float) -> None:
        if self._cols is not None and self.enabled:
            # One stream (the built-in tracer's programs): streams are the composer's.
            self._cols.append(**row, stream=0, wait=-1)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Record nothing inside: tensors the tracer makes for its own bookkeeping, which
        the program it stands for does not compute."""
        enabled, self.enabled = self.enabled, False
        try:
            yield
        finally:
            self.enabled = enabled

    def filling(self, te: bool = False) -> bool:
        """Whether a buffer the program or a library allocates is filled (deterministic
        algorithms; ``te``: one only Transformer Engine's layers allocate, :class:`Fills`)."""
        return self.fills is not None and (self.fills.te or not te)

    @contextmanager
    def library(self, te: bool = False) -> Iterator[None]:
        """Inside, every op's new outputs are buffers the program or a library allocates with
        ``torch.empty`` / ``at::empty`` (filled under deterministic algorithms); ``te``: only
        when the layers are Transformer Engine's (:meth:`filling`)."""
        on = self.filling(te)
        self._library += on
        try:
            yield
        finally:
            self._library -= on

    def _fill_rows(
        self, name: str, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor]
    ) -> None:
        """The fills of the buffers op ``name`` allocates, when deterministic algorithms fill."""
        if self.fills is None or not (name in ALLOCATING or self._library):
            return
        # A view of an argument, or an argument written in place, is no new buffer (below
        # autograd a view is not marked as one: compare storages); an empty one needs no
        # kernel.
        held = {storage_of(i) for i in ins}
        for t in outs:
            if not t.numel() or storage_of(t) in held:
                continue
            self.op(
                DETERMINISTIC_FILL,
                op_class("fill_"),
                flops=0.0,
                nbytes=_nbytes(t),
                dtype=dtype_name(t.dtype),
                shapes=shapes_text([[int(d) for d in t.shape]]),
            )

    # -- explicit records -----------------------------------------------------------------
    def collective(self, kind: CollectiveKind, nbytes: int, axis: str, name: str = "") -> None:
        """Record a collective over parallel ``axis`` moving ``nbytes`` per rank."""
        label = name or f"nccl:{kind.label}"
        self.no_kernel_row(
            label,
            OpClass.COLLECTIVE,
            coll_kind=int(kind),
            coll_bytes=int(nbytes),
            axis=AXES.index(axis),
        )

    def host_wait(self) -> None:
        """Record that the host waits here until the GPU has run everything issued so far
        (:data:`~echo_view.model.aten_ops.HOST_WAIT`)."""
        self.no_kernel_row(HOST_WAIT, OpClass.OTHER)

    def no_kernel_row(self, name: str, cls: int, **columns: float) -> None:
        """Record a row of no compute (no FLOPs, bytes, dtype or shapes): ``columns`` give
        the rest (a collective's kind, payload and axis; a stream wait's row)."""
        row: dict[str, float] = {
            "name": self.strings.intern(name),
            "op_class": cls,
            "flops": 0.0,
            "bytes": 0,
            "dtype": -1,
            "shapes": -1,
            "coll_kind": -1,
            "coll_bytes": 0,
            "axis": -1,
            "grad_bytes": 0,
        }
        row.update(columns)
        self._row(**row)

    def op(
        self,
        name: str,
        cls: int,
        *,
        flops: float,
        nbytes: int,
        dtype: str,
        shapes: str = "",
        grad_bytes: int = 0,
    ) -> None:
        """Record a synthetic compute op (a fused kernel the program does not dispatch)."""
        self._row(
            name=self.strings.intern(name),
            op_class=cls,
            flops=flops,
            bytes=nbytes,
            dtype=self.strings.intern(dtype),
            shapes=self.strings.intern(shapes),
            coll_kind=-1,
            coll_bytes=0,
            axis=-1,
            grad_bytes=grad_bytes,
        )

    def grad_ready(self, nbytes: int) -> None:
        """Mark that ``nbytes`` of parameter gradients are complete at this point."""
        if self._cols is not None and self.enabled and len(self._cols):
            # Attach to the latest op: the gradient is ready when that kernel ends.
            self._cols._buffers["grad_bytes"][-1] += nbytes

    # -- dispatch ------------------------------------------------------------------------
    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if any(is_traceable_wrapper_subclass(a) for a in tree_flatten((args, kwargs))[0]):
            # A tensor subclass (DTensor): its handler runs the op on its local shards, which
            # come back through this mode and are recorded with their local shapes.
            return NotImplemented
        name = func.overloadpacket.__name__
        if func.namespace in C10D_NAMESPACES:
            # Recorded at launch, before the fake backend runs it (and may refuse it).
            if name not in C10D_NO_KERNEL and self._cols is not None and self.enabled:
                self._dispatched_collective(f"{func.namespace}::{name}", args, kwargs or {})
            return func(*args, **(kwargs or {}))
        out = func(*args, **(kwargs or {}))
        if self._cols is None or not self.enabled or func.namespace == "prim":
            return out
        no_kernel = name in NO_KERNEL
        if no_kernel and not self._library:  # only an allocation in a library's scope fills
            return out
        flat_in, _ = tree_flatten((args, kwargs or {}))
        flat_out, _ = tree_flatten(out)
        ins = [t for t in flat_in if isinstance(t, torch.Tensor)]
        outs = [t for t in flat_out if isinstance(t, torch.Tensor)]
        self._fill_rows(name, ins, outs)
        if no_kernel or (not ins and not outs):
            return out
        cls = op_class(name)
        shapes = tensor_shapes(args, torch.Tensor)
        if cls == OpClass.GEMM:
            dims = gemm_dims(name, shapes)
            flops = dims.flops if dims is not None else 0.0
        elif name in SDPA:
            flops = _sdpa_flops(func, shapes, args, kwargs or {})
        elif name in ("flash_attn", "flash_attn_bwd"):
            # q, k as [batch, heads, seq, head_dim]; the backward's first argument is dout.
            q, k = shapes[0:2] if name == "flash_attn" else shapes[1:3]
            flops = attention_flops(
                q[0], q[1], q[2], k[2], q[3], causal=True, backward=name == "flash_attn_bwd"
            )
        else:
            flops = elementwise_flops(sum(int(t.numel()) for t in outs))
        nbytes = op_bytes(func, args, kwargs or {}, ins, outs)
        ref = outs[0] if outs else ins[0]
        dtype = dtype_name(ref.dtype)
        if cls == OpClass.GEMM and self._gemm_dtype is not None:
            dtype = self._gemm_dtype
        self._row(
            name=self.strings.intern(f"{func.namespace}::{name}"),
            op_class=cls,
            flops=flops,
            bytes=nbytes,
            dtype=self.strings.intern(dtype),
            shapes=self.strings.intern(shapes_text(shapes)),
            coll_kind=-1,
            coll_bytes=0,
            axis=-1,
            grad_bytes=0,
        )
        return out

    def _dispatched_collective(
        self, name: str, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> None:
        """A collective that reached the dispatcher: its kind from the catalogue, its payload
        (the whole buffer, as :meth:`collective` counts it) from the tensors, its group's
        ranks kept in :attr:`groups`; the axis is set by the caller."""
        op = name.split("::", 1)[1]
        if op in ("barrier", "barrier_"):
            # NCCL runs a barrier as an all-reduce of one element (ProcessGroupNCCL::barrier).
            kind, nbytes = CollectiveKind.ALL_REDUCE, 4
        else:
            kind = collective_kind_from_name(op)
            if kind == CollectiveKind.UNKNOWN:
                raise UnsupportedCollective(name)
            if kind == CollectiveKind.ALL_TO_ALL:
                # all_to_all_single's split sizes (c10d::alltoall_base_, after the process
                # group): the collective model times an even exchange only.
                splits = [
                    a for a in args if isinstance(a, list | tuple) and a and isinstance(a[0], int)
                ]
                if any(len(set(s)) > 1 for s in splits):
                    raise UnsupportedCollective(
                        f"{name} with uneven split sizes {list(splits[0])[:8]} (an all-to-all "
                        "is timed as an even exchange: give equal splits or none)"
                    )
            nbytes = _payload(name, kind, args, kwargs)
        assert self._cols is not None
        ranks = group_ranks(args)
        self.groups.append((len(self._cols), self._group_tuples.setdefault(ranks, ranks)))
        self.collective(kind, nbytes, "none", name)


def _payload(name: str, kind: CollectiveKind, args: Sequence[Any], kwargs: dict[str, Any]) -> int:
    """A dispatched collective's payload in bytes (the whole buffer, as
    :meth:`Recorder.collective` counts it), from its tensors."""
    if name.startswith("_c10d_functional"):
        # Functional collectives take the input and return the output.
        flat, _ = tree_flatten((list(args), kwargs))
        nbytes = sum(_nbytes(t) for t in flat if isinstance(t, torch.Tensor))
        return nbytes * len(group_ranks(args)) if kind in _OUTPUT_PAYLOAD else nbytes
    # c10d ops take (outputs, inputs) for gathers and scatters, else the buffers.
    outs = [t for t in tree_flatten(args[0])[0] if isinstance(t, torch.Tensor)]
    ins = [t for t in tree_flatten(args[1])[0] if isinstance(t, torch.Tensor)]
    gather_like = kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER)
    if gather_like and ins:
        return sum(_nbytes(t) for t in (outs if kind in _OUTPUT_PAYLOAD else ins))
    if kind == CollectiveKind.ALL_TO_ALL and ins:
        return sum(_nbytes(t) for t in ins)
    return sum(_nbytes(t) for t in outs)


def _arguments(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """``func``'s arguments by their schema names."""
    return {
        a.name: args[i] if i < len(args) else kwargs.get(a.name)
        for i, a in enumerate(func._schema.arguments)
    }


def _written_in_place(func: Any, values: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors ``func`` updates in place (its schema's ``Tensor(a!)`` arguments, not its
    ``out=`` ones); a fused optimizer's ``grads`` only when it unscales them."""
    fused = func.overloadpacket.__name__ in FUSED_OPTIMIZERS
    written: list[torch.Tensor] = []
    for a in func._schema.arguments:
        if a.alias_info is None or not a.alias_info.is_write or a.is_out:
            continue
        if fused and a.name == "grads" and values.get("grad_scale") is None:
            continue
        flat, _ = tree_flatten(values[a.name])
        written.extend(t for t in flat if isinstance(t, torch.Tensor))
    return written


def op_bytes(
    func: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    ins: Sequence[torch.Tensor],
    outs: Sequence[torch.Tensor],
) -> int:
    """Bytes a memory-bound kernel of ``func`` moves: every tensor it reads plus every tensor
    it writes. A tensor updated in place is read and written (twice), unless the op only
    overwrites it (:data:`OVERWRITES`: once); indexed reads and writes move only the selected
    elements (:data:`INDEXED_READS`: at most the whole source; :data:`INDEXED_WRITES`);
    ``out=`` tensors are written."""
    name = func.overloadpacket.__name__
    fresh = [t for t in outs if not any(t is i for i in ins)]
    if name in INDEXED_READS and ins:
        # The selected elements are read, but no more than the source holds (a gather that
        # repeats rows, like a top-k permutation, reads the repeats from cache).
        out_bytes = sum(_nbytes(t) for t in fresh)
        return sum(_nbytes(t) for t in ins[1:]) + min(_nbytes(ins[0]), out_bytes) + out_bytes
    values = _arguments(func, args, kwargs)
    written = _written_in_place(func, values)
    if name in INDEXED_WRITES and written:
        target = written[0]
        others = [t for t in ins if t is not target]
        touched = max((int(t.numel()) for t in others), default=0) * target.element_size()
        accumulate = name in ACCUMULATES or values.get("accumulate") is True
        return sum(_nbytes(t) for t in others) + touched * (2 if accumulate else 1)
    nbytes = sum(_nbytes(t) for t in ins) + sum(_nbytes(t) for t in fresh)
    if name not in OVERWRITES:
        nbytes += sum(_nbytes(t) for t in written)
    return nbytes


def _sdpa_flops(
    func: Any, shapes: list[list[int]], args: Sequence[Any], kwargs: dict[str, Any]
) -> float:
    """FLOPs of a ``scaled_dot_product_*attention`` kernel: q, k as [batch, heads, seq, dim]
    (the backward's first argument is the output gradient); causal from its ``is_causal``."""
    backward = func.overloadpacket.__name__.endswith("_backward")
    q, k = shapes[1:3] if backward else shapes[0:2]
    names = [a.name for a in func._schema.arguments]
    causal = kwargs.get("is_causal", False)
    if "is_causal" in names and names.index("is_causal") < len(args):
        causal = args[names.index("is_causal")]
    causal = bool(causal)
    return attention_flops(q[0], q[1], q[2], k[2], q[3], causal=causal, backward=backward)


def numel(shape: tuple[int, ...] | list[int]) -> int:
    """Number of elements of ``shape``."""
    return math.prod(shape)


def tensor_shapes(args: Sequence[Any], tensor_type: type[Any]) -> list[list[int]]:
    """Shapes of the tensor arguments, in order (nested lists flattened one level)."""
    out: list[list[int]] = []
    for a in args:
        if isinstance(a, tensor_type):
            out.append([int(d) for d in a.shape])
        elif isinstance(a, (list, tuple)):
            out.extend([int(d) for d in x.shape] for x in a if isinstance(x, tensor_type))
    return out
