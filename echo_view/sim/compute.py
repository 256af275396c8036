"""Compute cost models: how long each non-collective op takes.

A :class:`ComputeModel` turns a workload's ops into durations in one vectorised call. The one
replay and what-if use, :class:`MeasuredCompute`, keeps each op's measured duration and scales
it by a factor per op class (``compute.scale.gemm=0.5`` asks "what if GEMMs ran twice as
fast?"). Kernel names are sorted into classes by :func:`classify_kernels`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from echo_view.errors import ConfigError, known_keys_hint
from echo_view.model.comm_kernels import is_comm_kernel
from echo_view.model.workload import (
    CLASS_ATTENTION,
    CLASS_COLLECTIVE,
    CLASS_ELEMENTWISE,
    CLASS_EMBEDDING,
    CLASS_GEMM,
    CLASS_NORMALIZATION,
    CLASS_OPTIMIZER,
    CLASS_OTHER,
    CLASS_REDUCTION,
    OP_CLASS_NAMES,
    Workload,
)
from echo_view.units import float_ns

I64 = npt.NDArray[np.integer[Any]]

#: Largest what-if factor (``compute.scale.*``, ``comm.scale``): beyond it times leave int64
#: nanoseconds, and no question needs it.
MAX_SCALE = 1_000.0

#: ``compute.scale.<key>`` keys: every GPU op class but collectives, ``cpu`` for CPU ops, and
#: ``all`` for every GPU op that is not a collective.
SCALE_KEYS: tuple[str, ...] = (
    *(c for c in OP_CLASS_NAMES if c != "collective"),
    "cpu",
    "all",
)

# Kernel-name keywords (lower case), tried in order; the first class with a match wins.
# Attention before GEMM (flash kernels mention GEMM tiles), normalisation and embedding before
# the generic elementwise names.
_RULES: tuple[tuple[int, tuple[str, ...]], ...] = (
    (CLASS_ATTENTION, ("flash", "fmha", "attention", "attn", "sdpa")),
    (CLASS_EMBEDDING, ("embedding", "embbag", "index_select")),
    # cuDNN's batch norm and layout transforms, before its convolutions ("cudnn" below).
    (CLASS_NORMALIZATION, ("cudnn::bn_fw", "cudnn::bn_bw")),
    (CLASS_ELEMENTWISE, ("nchwtonhwc", "nhwctonchw", "scalepackedtensor")),
    (
        CLASS_GEMM,
        (
            "gemm", "gemv", "cutlass", "cublas", "volta_", "turing_", "ampere_", "hopper_",
            "xmma", "wgmma", "matmul", "dot_kernel", "splitkreduce", "cudnn", "fprop",
            "dgrad", "wgrad", "nvjet",  # (cuBLAS's Hopper and Blackwell GEMMs: nvjet_tst_...)
        ),
    ),
    (CLASS_NORMALIZATION, ("layer_norm", "layernorm", "rms_norm", "rmsnorm", "batch_norm",
                           "batchnorm", "group_norm", "norm_kernel")),
    (CLASS_OPTIMIZER, ("adam", "adagrad", "sgd", "multi_tensor", "optimizer", "lamb_")),
    (CLASS_REDUCTION, ("reduce", "scan", "softmax", "argmax", "topk", "sort", "sum_kernel")),
    (CLASS_ELEMENTWISE, ("elementwise", "vectorized", "unrolled", "pointwise", "fill", "copy")),
)  # fmt: skip


@functools.lru_cache(maxsize=65536)
def classify_kernel(name: str) -> int:
    """The op class of a GPU kernel, from its name (``other`` when nothing matches).
    Communication kernels (NCCL, RCCL, DeepEP) are those of
    :func:`~echo_view.model.comm_kernels.is_comm_kernel`."""
    if is_comm_kernel(name):
        return CLASS_COLLECTIVE
    low = name.lower()
    for cls, words in _RULES:
        if any(w in low for w in words):
            return cls
    return CLASS_OTHER


def classify_kernels(names: Iterable[str]) -> list[int]:
    """:func:`classify_kernel` over many names."""
    return [classify_kernel(n) for n in names]


class ComputeModel(Protocol):
    """Durations of a workload's ops (collectives get their time from the comm model)."""

    def durations(self, workload: Workload) -> I64:
        """One duration in ns per op."""
        ...


class MeasuredCompute:
    """Each op's own cost (the measured duration in a replay), scaled per class.

    ``scale`` maps :data:`SCALE_KEYS` to factors: a GPU op of class ``c`` (not a collective,
    copies included) runs ``scale[c] * scale["all"]`` times its cost; CPU ops run
    ``scale["cpu"]`` times theirs (gaps between CPU ops are CPU time too and scale with it).
    """

    def __init__(self, scale: Mapping[str, float] | None = None) -> None:
        scale = dict(scale or {})
        unknown = sorted(set(scale) - set(SCALE_KEYS))
        if unknown:
            raise ConfigError(
                f"unknown compute scale {', '.join('compute.scale.' + k for k in unknown)}",
                hint=known_keys_hint(
                    "compute.scale." + unknown[0], ["compute.scale." + k for k in SCALE_KEYS]
                ),
            )
        for key, value in scale.items():
            if not 0 <= value <= MAX_SCALE:
                raise ConfigError(
                    f"compute.scale.{key} must be between 0 and {MAX_SCALE:g}, got {value}"
                )
        self.scale = scale

    def factors(self, workload: Workload) -> npt.NDArray[np.float64]:
        """The factor each op's cost is multiplied by."""
        per_class = np.array([self.scale.get(c, 1.0) for c in OP_CLASS_NAMES], dtype=np.float64)
        per_class[CLASS_COLLECTIVE] = 1.0
        gpu = workload.gpu_mask()
        f = np.where(gpu, per_class[workload.ops.op_class] * self.scale.get("all", 1.0), 1.0)
        cpu = ~gpu
        f[cpu] = self.scale.get("cpu", 1.0)
        f[workload.ops.coll >= 0] = 1.0
        return f

    def durations(self, workload: Workload) -> I64:
        return _scaled(workload.ops.dur_ns, self.factors(workload))

    def gaps(self, workload: Workload) -> I64:
        """Lane gaps under the same scaling (CPU time between CPU ops scales with ``cpu``)."""
        cpu = self.scale.get("cpu", 1.0)
        return _scaled(workload.ops.gap_ns, np.where(workload.gpu_mask(), 1.0, cpu))


def _scaled(values: npt.ArrayLike, factor: npt.NDArray[np.float64]) -> I64:
    v = np.asarray(values, dtype=np.int64)
    if np.all(factor == 1.0):
        return v.copy()
    return float_ns(v * factor)


__all__ = [
    "SCALE_KEYS",
    "ComputeModel",
    "MeasuredCompute",
    "classify_kernel",
    "classify_kernels",
]
