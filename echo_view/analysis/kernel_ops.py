"""The work of one profiled aten op from its recorded shapes: kernel class, FLOPs, bytes, dtype.

PyTorch's profiler with ``record_shapes=True`` stores each CPU op's ``Input Dims`` (one list of
sizes per argument, ``[]`` for scalars) and ``Input type`` (``float``, ``c10::BFloat16``,
``Scalar``...). That is enough to count the work of matrix products, flash attention and the
memory-bound ops whose outputs follow from their inputs. FLOPs follow the rules the ex-situ
tracer uses too (:mod:`echo_view.model.aten_ops`), so that parameters fitted on measured
kernels apply to traced graphs unchanged; bytes are the sizes of the tensors read plus those
written, as the tracer counts them: an in-place op's first argument is read and written, except
by ops that only overwrite it (``copy_``, ``fill_``, ``zero_``: written once).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from echo_view.model.aten_ops import GEMM, OVERWRITES, attention_flops, gemm_dims
from echo_view.model.dtypes import dtype_info
from echo_view.model.graph import OpClass

#: More elements than any GPU holds (2^48: 512 TB of bf16): a shape that is no tensor's
#: (`calibrate compute` fitted a [1e30, 1e30] matmul and reported a 2.9e14 % error).
_MAX_NUMEL = 1 << 48
# Flash/memory-efficient attention kernels take q, k, v as [batch, seq, heads, head_dim].
_ATTN_FWD = frozenset({"_flash_attention_forward", "_efficient_attention_forward"})
_ATTN_BWD = frozenset({"_flash_attention_backward", "_efficient_attention_backward"})
# Memory-bound ops with one output shaped like the broadcast of their tensor inputs.
_ELEMENTWISE = frozenset(
    {
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "neg",
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "reciprocal",
        "sin",
        "cos",
        "tanh",
        "sigmoid",
        "relu",
        "gelu",
        "silu",
        "threshold_backward",
        "gelu_backward",
        "silu_backward",
        "sigmoid_backward",
        "tanh_backward",
        "clone",
    }
)
# In-place variants and copies: the output is the first argument.
_IN_PLACE = frozenset(
    {
        "add_",
        "sub_",
        "mul_",
        "div_",
        "addcmul_",
        "addcdiv_",
        "lerp_",
        "relu_",
        "sqrt_",
        "copy_",
        "fill_",
        "zero_",
    }
)
# Softmax and its backward: one output shaped like the first input.
_SOFTMAX = frozenset({"_softmax", "_log_softmax", "_softmax_backward_data"})
_LAYER_NORM = "native_layer_norm"
_LAYER_NORM_BWD = "native_layer_norm_backward"

#: Op names (without ``aten::``) this module counts.
SUPPORTED: frozenset[str] = frozenset(
    {
        *GEMM,
        *_ATTN_FWD,
        *_ATTN_BWD,
        *_ELEMENTWISE,
        *_IN_PLACE,
        *_SOFTMAX,
        _LAYER_NORM,
        _LAYER_NORM_BWD,
    }
)


@dataclass(frozen=True, slots=True)
class OpWork:
    """What one op does: its :class:`~echo_view.model.graph.OpClass`, FLOPs, bytes and dtype."""

    op_class: int
    flops: float
    nbytes: float
    dtype: str


@dataclass(frozen=True, slots=True)
class _Tensor:
    shape: tuple[int, ...]
    dtype: str
    itemsize: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


def _tensors(dims: Sequence[Any], types: Sequence[Any]) -> list[_Tensor | None]:
    """One entry per argument: a tensor, or ``None`` for scalars, lists and unknown types."""
    out: list[_Tensor | None] = []
    for d, t in zip(dims, types, strict=False):
        known = dtype_info(t)
        if (
            known is None
            or not isinstance(d, list | tuple)
            or not all(isinstance(x, int) and x >= 0 for x in d)
            or math.prod(d) > _MAX_NUMEL
        ):
            out.append(None)
            continue
        out.append(_Tensor(tuple(d), known.short, known.size))
    return out


def _gemm(name: str, args: list[_Tensor | None]) -> OpWork | None:
    mats = [a for a in args if a is not None]
    dims = gemm_dims(name, [t.shape for t in mats])
    if dims is None:
        return None
    # The left operand: the first tensor, or the second after the bias of addmm & co.
    a = mats[1] if name in ("addmm", "baddbmm", "addbmm") else mats[0]
    nbytes = sum(t.nbytes for t in mats) + dims.out_numel * a.itemsize
    return OpWork(OpClass.GEMM, dims.flops, float(nbytes), a.dtype)


def _attention(
    name: str, args: list[_Tensor | None], concrete: Sequence[Any] | None
) -> OpWork | None:
    backward = name in _ATTN_BWD
    first = 1 if backward else 0
    qkv = args[first : first + 3]
    if len(qkv) < 3 or any(t is None or len(t.shape) != 4 for t in qkv):
        return None
    q, k, _ = (t for t in qkv if t is not None)
    b, s_q, h, d = q.shape
    s_k = k.shape[1]
    # Causal unless the recorded flag says otherwise (the tracer assumes causal attention).
    causal = True
    if concrete is not None and name.startswith("_flash"):
        flags = [c for c in concrete if c in ("True", "False")]
        if flags:
            causal = flags[0] == "True"
    flops = attention_flops(b, h, s_q, s_k, d, causal=causal, backward=backward)
    ins = sum(t.nbytes for t in args if t is not None)
    outs = 3 * q.nbytes if backward else q.nbytes
    return OpWork(OpClass.ATTENTION, flops, float(ins + outs), q.dtype)


def _memory(name: str, args: list[_Tensor | None]) -> OpWork | None:
    tensors = [t for t in args if t is not None]
    if not tensors:
        return None
    first = tensors[0]
    ins = sum(t.nbytes for t in tensors)
    if name in _IN_PLACE:
        cls = OpClass.COPY if name == "copy_" else OpClass.ELEMENTWISE
        written_back = 0 if name in OVERWRITES else first.nbytes
        return OpWork(cls, float(first.numel), float(ins + written_back), first.dtype)
    if name in _SOFTMAX:
        return OpWork(OpClass.REDUCTION, float(first.numel), float(ins + first.nbytes), first.dtype)
    if name == _LAYER_NORM:
        rows = math.prod(first.shape[:-1]) if first.shape else 1
        out = first.nbytes + 2 * rows * 4  # y, and fp32 mean and rstd per row
        return OpWork(OpClass.NORMALIZATION, float(first.numel), float(ins + out), first.dtype)
    if name == _LAYER_NORM_BWD:
        if len(tensors) < 2:
            return None
        # grad_input like the input, grad_weight and grad_bias like the weight.
        x = tensors[1]
        w = tensors[4].nbytes if len(tensors) > 4 else 0
        out = x.nbytes + 2 * w
        return OpWork(OpClass.NORMALIZATION, float(x.numel), float(ins + out), x.dtype)
    try:
        shape = _broadcast([t.shape for t in tensors])
    except ValueError:
        return None
    numel = math.prod(shape)
    cls = OpClass.COPY if name == "clone" else OpClass.ELEMENTWISE
    return OpWork(cls, float(numel), float(ins + numel * first.itemsize), first.dtype)


def _broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for s in shapes:
        for i, size in enumerate(s, start=ndim - len(s)):
            if size != 1:
                if out[i] not in (1, size):
                    raise ValueError("shapes do not broadcast")
                out[i] = size
    return tuple(out)


def op_work(
    name: str,
    dims: Sequence[Any],
    types: Sequence[Any],
    concrete: Sequence[Any] | None = None,
) -> OpWork | None:
    """The work of op ``name`` (``aten::mm`` or ``mm``) given its recorded ``Input Dims``,
    ``Input type`` and optionally ``Concrete Inputs``; ``None`` for ops this module does not
    count or shapes it cannot read."""
    base = name.removeprefix("aten::")
    if base not in SUPPORTED:
        return None
    args = _tensors(dims, types)
    if base in GEMM:
        return _gemm(base, args)
    if base in _ATTN_FWD or base in _ATTN_BWD:
        return _attention(base, args, concrete)
    return _memory(base, args)
