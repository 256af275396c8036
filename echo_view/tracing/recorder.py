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
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from echo_view.model.aten_ops import (
    NO_KERNEL,
    attention_flops,
    elementwise_flops,
    gemm_dims,
    op_class,
)
from echo_view.model.columns import ColumnBuilder
from echo_view.model.dtypes import short_dtype
from echo_view.model.graph import AXES, OP_COLUMNS, OpClass, OpTable, shapes_text
from echo_view.model.kinds import CollectiveKind
from echo_view.model.strings import StringTable


def dtype_name(dtype: torch.dtype) -> str:
    """Short dtype name (``bf16``)."""
    return short_dtype(str(dtype)) or str(dtype).removeprefix("torch.")


def _nbytes(t: torch.Tensor) -> int:
    return int(t.numel()) * t.element_size()


class Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Collects ops into per-phase :class:`OpTable` columns."""

    def __init__(self, strings: StringTable) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.strings = strings
        self._cols: ColumnBuilder | None = None
        self.enabled = True
        self._gemm_dtype: str | None = None

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

    def end(self) -> OpTable:
        """Finish the current op sequence and return it."""
        if self._cols is None:
            raise RuntimeError("Recorder.end() without begin()")
        table = OpTable(**self._cols.columns())
        self._cols = None
        return table

    def _row(self, **row: float) -> None:
        if self._cols is not None and self.enabled:
            self._cols.append(**row)

    # -- explicit records -----------------------------------------------------------------
    def collective(self, kind: CollectiveKind, nbytes: int, axis: str, name: str = "") -> None:
        """Record a collective over parallel ``axis`` moving ``nbytes`` per rank."""
        label = name or f"nccl:{kind.label}"
        self._row(
            name=self.strings.intern(label),
            op_class=OpClass.COLLECTIVE,
            flops=0.0,
            bytes=0,
            dtype=-1,
            shapes=-1,
            coll_kind=int(kind),
            coll_bytes=int(nbytes),
            axis=AXES.index(axis),
            grad_bytes=0,
        )

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
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in NO_KERNEL or self._cols is None or not self.enabled:
            return out
        flat_in, _ = tree_flatten((args, kwargs or {}))
        flat_out, _ = tree_flatten(out)
        ins = [t for t in flat_in if isinstance(t, torch.Tensor)]
        outs = [t for t in flat_out if isinstance(t, torch.Tensor)]
        if not ins and not outs:
            return out
        cls = op_class(name)
        shapes = tensor_shapes(args, torch.Tensor)
        if cls == OpClass.GEMM:
            dims = gemm_dims(name, shapes)
            flops = dims.flops if dims is not None else 0.0
        elif name in ("flash_attn", "flash_attn_bwd"):
            # q, k as [batch, heads, seq, head_dim]; the backward's first argument is dout.
            q, k = shapes[0:2] if name == "flash_attn" else shapes[1:3]
            flops = attention_flops(
                q[0], q[1], q[2], k[2], q[3], causal=True, backward=name == "flash_attn_bwd"
            )
        else:
            flops = elementwise_flops(sum(int(t.numel()) for t in outs))
        # In-place ops write what they read: count the written tensor once.
        nbytes = sum(_nbytes(t) for t in ins) + sum(
            _nbytes(t) for t in outs if not any(t is i for i in ins)
        )
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
