"""What an aten op costs: its kernel class, FLOPs and the bytes it moves.

Views and metadata ops launch no kernel and are skipped. FLOPs follow the usual convention
(a multiply-add is 2 FLOPs); bytes are the sizes of the tensors read and written, which is what
a memory-bound kernel moves through HBM.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from echo_view.model.graph import OpClass

# Ops that only create views or touch metadata: no kernel runs.
NO_KERNEL = frozenset(
    {
        "view",
        "_unsafe_view",
        "t",
        "transpose",
        "permute",
        "expand",
        "reshape",
        "detach",
        "alias",
        "as_strided",
        "slice",
        "select",
        "split",
        "split_with_sizes",
        "unsqueeze",
        "squeeze",
        "unbind",
        "chunk",
        "narrow",
        "empty",
        "empty_like",
        "empty_strided",
        "lift_fresh",
        "_reshape_alias",
        "view_as",
        "expand_as",
        "unflatten",
        "flatten",
        "new_empty",
        "new_empty_strided",
        "scalar_tensor",
        "_to_copy_meta",
        "set_",
        "resize_",
        "diagonal",
        "movedim",
        "numpy_T",
        "contiguous_noop",
        "is_same_size",
        "sym_size",
    }
)
_GEMM = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm"})
_NORM = frozenset(
    {
        "native_layer_norm",
        "native_layer_norm_backward",
        "layer_norm",
        "rms_norm",
        "_fused_rms_norm",
        "_fused_rms_norm_backward",
        "rms_norm_bwd",
        "native_group_norm",
    }
)
_EMB = frozenset({"embedding", "embedding_dense_backward", "embedding_backward"})
_REDUCE = frozenset(
    {
        "sum",
        "mean",
        "amax",
        "max",
        "min",
        "_softmax",
        "softmax",
        "_log_softmax",
        "_softmax_backward_data",
        "_log_softmax_backward_data",
        "nll_loss_forward",
        "nll_loss_backward",
        "nll_loss2d_forward",
        "norm",
        "linalg_vector_norm",
        "var_mean",
        "logsumexp",
        "_safe_softmax",
        "argmax",
        "cumsum",
    }
)
_COPY = frozenset(
    {
        "copy_",
        "clone",
        "cat",
        "_to_copy",
        "stack",
        "index_select",
        "gather",
        "scatter",
        "index",
        "index_put_",
        "contiguous",
    }
)
_ATTN = frozenset({"flash_attn", "flash_attn_bwd"})


def op_class(name: str) -> int:
    """The :class:`OpClass` of aten op ``name`` (overload stripped: ``addmm``)."""
    if name in _GEMM:
        return OpClass.GEMM
    if name in _ATTN:
        return OpClass.ATTENTION
    if name in _NORM:
        return OpClass.NORMALIZATION
    if name in _EMB:
        return OpClass.EMBEDDING
    if name in _REDUCE:
        return OpClass.REDUCTION
    if name in _COPY:
        return OpClass.COPY
    if name.startswith("_foreach") or name.startswith("_fused_adam"):
        return OpClass.OPTIMIZER
    return OpClass.ELEMENTWISE


def gemm_flops(name: str, shapes: Sequence[Sequence[int]]) -> float:
    """FLOPs of a matrix product given its tensor-argument shapes."""
    if name in ("mm", "matmul") and len(shapes) >= 2 and len(shapes[0]) == 2:
        (m, k), (_, n) = shapes[0], shapes[1][-2:]
        return 2.0 * m * k * n
    if name == "addmm" and len(shapes) >= 3:
        (m, k), (_, n) = shapes[1], shapes[2]
        return 2.0 * m * k * n + m * n
    if name in ("bmm", "baddbmm", "addbmm"):
        a, b = (shapes[0], shapes[1]) if name == "bmm" else (shapes[1], shapes[2])
        batch, m, k = a
        n = b[-1]
        return 2.0 * batch * m * k * n
    if name == "linear" and len(shapes) >= 2:
        x, w = shapes[0], shapes[1]
        rows = math.prod(x[:-1])
        return 2.0 * rows * x[-1] * w[0]
    return 0.0


def elementwise_flops(out_numel: int) -> float:
    """One FLOP per output element: a good enough count for memory-bound kernels."""
    return float(out_numel)


def tensor_shapes(args: Sequence[Any], tensor_type: type[Any]) -> list[list[int]]:
    """Shapes of the tensor arguments, in order (nested lists flattened one level)."""
    out: list[list[int]] = []
    for a in args:
        if isinstance(a, tensor_type):
            out.append([int(d) for d in a.shape])
        elif isinstance(a, (list, tuple)):
            out.extend([int(d) for d in x.shape] for x in a if isinstance(x, tensor_type))
    return out
