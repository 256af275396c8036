"""The aten ops echo-view counts: one catalogue of op kinds and work rules.

Used by the ex-situ tracer (shapes from fake tensors) and by the kernel-fit analysis (shapes
from a profiler's ``Input Dims``), so that parameters fitted on measured kernels apply to traced
graphs unchanged. Conventions: a multiply-add is 2 FLOPs; ``addmm`` adds ``m*n`` for its bias;
``addbmm`` sums a batch of products into one output (a GEMM whose K is ``batch*k``); causal
attention does half the products of full attention and its backward 2.5 times the forward's
matrix work; a memory-bound op does one FLOP per output element. Views and metadata ops
launch no kernel. Names are without ``aten::`` and without an overload (``addmm``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

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
        # ``.item()``: fake tensors answer it only for values made from Python numbers, which a
        # GPU run keeps on the host (an optimizer's step counters, read once a parameter by
        # Adam's bias corrections); a GPU tensor's value cannot be read while tracing.
        "_local_scalar_dense",
    }
)
GEMM = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm"})
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
#: In-place ops that overwrite the tensor they write without reading it (counted once, as
#: written). Every other in-place op reads the tensor it updates and writes it back: a
#: memory-bound kernel moves it twice.
OVERWRITES = frozenset(
    {
        "copy_",
        "fill_",
        "zero_",
        "_foreach_copy_",
        "_foreach_zero_",
        "normal_",
        "uniform_",
        "bernoulli_",
        "random_",
        "exponential_",
    }
)
#: In-place ops that write only the elements their index selects (as many as the largest of
#: the other tensor arguments, the indices or the values), read back first when accumulating.
INDEXED_WRITES = frozenset(
    {
        "index_put_",
        "_index_put_impl_",
        "scatter_",
        "scatter_add_",
        "scatter_reduce_",
        "index_add_",
        "index_copy_",
    }
)
#: Of those, the ones that add into the selected elements (``index_put_`` does when its
#: ``accumulate`` flag is set).
ACCUMULATES = frozenset({"scatter_add_", "scatter_reduce_", "index_add_"})
#: Ops that read only the elements their index selects from their first argument: as many as
#: they write, at most the whole argument.
INDEXED_READS = frozenset({"gather", "index", "index_select", "take"})
#: PyTorch's fused optimizer kernels write their ``grads`` back only when given a
#: ``grad_scale`` (they unscale them in place; ``aten/src/ATen/native/cuda/fused_adam_utils.cuh``
#: stores the gradient only ``if (i != kGradIdx || grad_scale_ptr)``).
FUSED_OPTIMIZERS = frozenset({"_fused_adam_", "_fused_adamw_", "_fused_adagrad_", "_fused_sgd_"})

#: PyTorch's fused attention kernels (``F.scaled_dot_product_attention``) and their backwards.
SDPA = frozenset(
    f"_scaled_dot_product_{impl}{suffix}"
    for impl in (
        "flash_attention",
        "flash_attention_for_cpu",
        "efficient_attention",
        "cudnn_attention",
        "fused_attention_overrideable",
    )
    for suffix in ("", "_backward")
)
_ATTN = frozenset({"flash_attn", "flash_attn_bwd"}) | SDPA

#: Ops whose CUDA implementation takes its outputs from ATen's allocation functions
#: (``at::empty``, ``empty_like``, ``empty_strided`` through the dispatcher), whose buffers
#: ``torch.use_deterministic_algorithms(True)`` fills with NaN before the op runs
#: (``fill_uninitialized_memory``, on by default: ``at::native::empty_cuda``). Structured
#: kernels (``mm``, ``add``, ``gelu``, ``_softmax`` ...) allocate through
#: ``at::detail::empty_cuda``, which does not fill. These do: ``clone`` and ``_to_copy``
#: (``empty_like`` / ``empty_strided``, then a copy), dropout and its backward and layer norm
#: and its backward (``empty_like``; Transformer Engine's and Apex's norms alike), the fused
#: attention kernels (Transformer Engine's cuDNN attention, FlashAttention, PyTorch's SDPA).
#: Other outputs are filled where the tracer marks a program's own allocation or a library
#: kernel's (``Recorder.library``): Transformer Engine's GEMM outputs, the fused softmax's,
#: Megatron's ``torch.empty`` for a collective's output.
ALLOCATING = (
    frozenset(
        {
            "clone",
            "_to_copy",
            "native_dropout",
            "native_dropout_backward",
            "native_layer_norm",
            "native_layer_norm_backward",
            "rms_norm",
            "rms_norm_bwd",
        }
    )
    | _ATTN
)
#: The graph row of one such fill (``aten::fill_`` called inside the allocation, not by the
#: program): a kernel writing the buffer once.
DETERMINISTIC_FILL = "aten::fill_ (uninitialized)"
#: The graph row of a point where the host waits for the GPU's work so far to finish (a
#: device-to-host read of a result the program needs, or an explicit stream synchronize): no
#: kernel; the host issues nothing after it until the stream has drained.
HOST_WAIT = "cudaStreamSynchronize"


_CLASSES: tuple[tuple[frozenset[str], int], ...] = (
    (GEMM, OpClass.GEMM),
    (_ATTN, OpClass.ATTENTION),
    (_NORM, OpClass.NORMALIZATION),
    (_EMB, OpClass.EMBEDDING),
    (_REDUCE, OpClass.REDUCTION),
    (_COPY, OpClass.COPY),
)


def op_class(name: str) -> int:
    """The :class:`OpClass` of aten op ``name`` (overload stripped: ``addmm``)."""
    for names, cls in _CLASSES:
        if name in names:
            return cls
    if name.startswith(("_foreach", "_fused_adam")):
        return OpClass.OPTIMIZER
    return OpClass.ELEMENTWISE


@dataclass(frozen=True, slots=True)
class GemmDims:
    """A matrix product as ``batch`` independent ``m x k`` times ``k x n`` products, plus
    whether it adds a bias (``addmm``)."""

    batch: int
    m: int
    n: int
    k: int
    bias: bool = False

    @property
    def flops(self) -> float:
        """Multiply-adds as 2 FLOPs, plus one add per output element for a bias."""
        return 2.0 * self.batch * self.m * self.n * self.k + (self.m * self.n if self.bias else 0)

    @property
    def out_numel(self) -> int:
        """Elements of the output."""
        return self.batch * self.m * self.n


def gemm_dims(name: str, shapes: Sequence[Sequence[int]]) -> GemmDims | None:
    """The :class:`GemmDims` of matrix product ``name`` (``aten::addmm`` or ``addmm``) given its
    tensor arguments' shapes in call order, or ``None`` for other ops and unreadable shapes."""
    op = name.rsplit("::", 1)[-1].split(".", 1)[0]
    args = [tuple(int(d) for d in s) for s in shapes]
    if op in ("mm", "matmul", "linear", "bmm"):
        pair = args[0:2]
    elif op in ("addmm", "baddbmm", "addbmm"):
        pair = args[1:3]
    else:
        return None
    if len(pair) < 2 or len(pair[0]) < 2 or not pair[1]:
        return None
    a, b = pair
    if op == "linear":  # x [..., K] times weight [N, K]
        return GemmDims(1, math.prod(a[:-1]), b[0], a[-1])
    if op in ("bmm", "baddbmm"):
        if len(a) != 3 or len(b) != 3:
            return None
        return GemmDims(a[0], a[1], b[-1], a[2])
    if op == "addbmm":  # a batch of products summed into one output
        if len(a) != 3 or len(b) != 3:
            return None
        return GemmDims(1, a[1], b[-1], a[0] * a[2])
    if op == "addmm" and (len(a) != 2 or len(b) != 2):
        return None
    # mm / matmul: leading dimensions of the left operand are rows.
    return GemmDims(1, math.prod(a[:-1]), b[-1], a[-1], bias=op == "addmm")


def attention_flops(
    batch: int, heads: int, s_q: int, s_k: int, head_dim: int, *, causal: bool, backward: bool
) -> float:
    """FLOPs of scaled dot-product attention: QK^T and PV are each ``2*b*h*s_q*s_k*d``, halved by
    a causal mask; the backward pass does 2.5x the forward's matrix work (five products, not
    two)."""
    fwd = 4.0 * batch * heads * s_q * s_k * head_dim * (0.5 if causal else 1.0)
    return fwd * 2.5 if backward else fwd


def elementwise_flops(out_numel: int) -> float:
    """One FLOP per output element: a good enough count for memory-bound kernels."""
    return float(out_numel)
