"""Communication kernel names -> collective, library, algorithm, protocol, reduction, dtype.

Two libraries launch the communication kernels of training jobs: NCCL (and AMD's RCCL, which
keeps NCCL's names) and DeepEP, the expert-parallel all-to-all of MoE models.

NCCL kernel names seen in real traces:

- NCCL <= 2.18: ``ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)``,
  ``ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(...)``
- NCCL >= 2.19: ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)``,
  ``ncclDevKernel_AllGather_RING_LL(...)``, ``ncclDevKernel_SendRecv(...)``
- RCCL / generic launches: ``ncclDevKernel_Generic(...)`` (the collective is not in the name).

DeepEP kernels (``deep_ep::`` upstream, ``dpsk::ep::`` in DeepSeek's published DeepSeek-V3
profile) are C++ templates: ``void dpsk::ep::internode::dispatch<false, 8, true, 8>(...)``,
``deep_ep::intranode::combine<...>``, ``deep_ep::internode_ll::dispatch<...>``. ``dispatch``
sends each token to the ranks of its experts and ``combine`` brings the results back (an
all-to-all-v each way); ``notify_dispatch`` / ``cached_notify`` / ``notify_combine`` exchange
the token counts first (a small all-to-all). The namespace is the path: ``intranode`` (NVLink),
``internode`` (NVLink and RDMA) or ``internode_ll`` (low-latency, RDMA). Layout computation
(``get_dispatch_layout``) and buffer cleaning are local work, not communication.

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
_DEEPEP = re.compile(
    r"^(?:void\s+)?(?:deep_ep|dpsk::ep)::(intranode|internode|internode_ll)::"
    r"(dispatch|combine|notify_dispatch|notify_combine|cached_notify(?:_dispatch|_combine)?)\b"
)
#: DeepEP's namespaces as the path the data takes.
_DEEPEP_PATHS = {"intranode": "intranode", "internode": "internode", "internode_ll": "low_latency"}


@dataclass(frozen=True, slots=True)
class CommKernelInfo:
    """What a communication kernel's name tells. ``library`` is ``nccl`` (NCCL and RCCL) or
    ``deepep``; for DeepEP ``algorithm`` is its path (``intranode``, ``internode``,
    ``low_latency``) and ``operation`` the kernel's part of the exchange (``dispatch``,
    ``combine``, or a count exchange: ``notify_dispatch``, ``notify_combine``,
    ``cached_notify``...)."""

    collective: CollectiveKind
    library: str = "nccl"
    algorithm: str | None = None
    protocol: str | None = None
    reduction: str | None = None
    dtype: str | None = None
    operation: str | None = None


def is_comm_kernel(name: str) -> bool:
    """True for communication kernels: NCCL/RCCL collectives and DeepEP's all-to-all."""
    return _PREFIX.match(name) is not None or _DEEPEP.match(name) is not None


def parse_comm_kernel_name(name: str) -> CommKernelInfo | None:
    """Parse a communication kernel's name; ``None`` when it is none."""
    m = _PREFIX.match(name)
    if m is None:
        d = _DEEPEP.match(name)
        if d is None:
            return None
        path, op = _DEEPEP_PATHS[d.group(1)], d.group(2)
        return CommKernelInfo(CollectiveKind.ALL_TO_ALL, "deepep", path, operation=op)
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
    return CommKernelInfo(kind, "nccl", algorithm, protocol, reduction, dtype)
