"""NCCL kernel names -> collective, algorithm, protocol, reduction, dtype.

Kernel names seen in real traces:

- NCCL <= 2.18: ``ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)``,
  ``ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(...)``
- NCCL >= 2.19: ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)``,
  ``ncclDevKernel_AllGather_RING_LL(...)``, ``ncclDevKernel_SendRecv(...)``
- RCCL / generic launches: ``ncclDevKernel_Generic(...)`` (the collective is not in the name).

Fields missing from the name stay ``None``: they are unknown, not guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from echo_view.model.collectives import collective_kind_from_name
from echo_view.model.kinds import CollectiveKind

_ALGORITHMS = {
    "RING",
    "TREE",
    "COLLNET",
    "COLLNETDIRECT",
    "COLLNETCHAIN",
    "NVLS",
    "NVLSTREE",
    "PAT",
}
_PROTOCOLS = {"LL", "LL128", "SIMPLE"}
_REDOPS = {"Sum", "Prod", "Max", "Min", "Avg", "PreMulSum", "SumPostDiv"}
_PREFIX = re.compile(r"^(?:void\s+)?(nccl(?:Sym)?(?:Dev)?Kernel)_([A-Za-z0-9_]+)")


@dataclass(frozen=True, slots=True)
class NcclKernelInfo:
    """What an NCCL kernel name tells."""

    collective: CollectiveKind
    algorithm: str | None = None
    protocol: str | None = None
    reduction: str | None = None
    dtype: str | None = None


def is_nccl_kernel(name: str) -> bool:
    """True for NCCL/RCCL communication kernels."""
    return _PREFIX.match(name) is not None


def parse_nccl_kernel_name(name: str) -> NcclKernelInfo | None:
    """Parse an NCCL kernel name; ``None`` when it is not an NCCL kernel."""
    m = _PREFIX.match(name)
    if m is None:
        return None
    tokens = m.group(2).split("_")
    op = tokens[0]
    rest = tokens[1:]
    algorithm = protocol = reduction = dtype = None
    leftovers: list[str] = []
    for tok in rest:
        up = tok.upper()
        if up in _ALGORITHMS and algorithm is None:
            algorithm = up
        elif up in _PROTOCOLS and protocol is None:
            protocol = up
        elif tok in _REDOPS and reduction is None:
            reduction = tok
        elif tok:
            leftovers.append(tok)
    if leftovers:
        # dtype names may contain underscores (int8_t, uint64_t); rejoin what is left.
        dtype = "_".join(leftovers)
    kind = CollectiveKind.UNKNOWN if op == "Generic" else collective_kind_from_name(op)
    return NcclKernelInfo(kind, algorithm, protocol, reduction, dtype)
