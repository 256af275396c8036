"""What deterministic algorithms cost a step beyond the traced fills of new buffers.

Under ``torch.use_deterministic_algorithms(True)`` (``[training] deterministic``, Megatron-LM's
``--deterministic-mode``) PyTorch fills every buffer it hands out with a known value; the tracer
records those of the ops it sees (``aten::fill_ (uninitialized)`` rows, docs/workloads.md
"Deterministic mode"). One buffer depends on the GPU the step runs on, so the simulator adds it
here rather than the GPU-independent graph: cuDNN's fused-attention backward on Hopper, asked
for a deterministic algorithm (Transformer Engine passes ``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0``
on), used the "dP-workspace decomposition", whose workspace holds ``b * h * s_q * s_kv * 2``
bytes (NVIDIA/cudnn-frontend pull request #398, 2026-07-16, which added a linear-workspace
engine for cuDNN 9.25 and states that before it deterministic mode "always forced" that
decomposition on Hopper; Transformer Engine v2.16 pins a cudnn-frontend of 2026-04-21).
Transformer Engine allocates the workspace on every backward call (``allocateSpace`` in
``fused_attn_bwd``, ``transformer_engine/pytorch/csrc/extensions/attention.cpp``), an
``at::empty`` that deterministic algorithms fill. The decomposition's own traffic through that
workspace is not timed: no measurement of its speed is published (the backward stays timed as
the default one)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from echo_view.model.attention_kernels import resolve_kernel
from echo_view.model.config import WorkloadConfig
from echo_view.model.graph import OpClass, OpTable, TracedGraph, parse_shapes_text
from echo_view.sim.cluster import Cluster

#: The fused attention backward's graph op.
ATTENTION_BACKWARD = "echo_view::flash_attn_bwd"
#: Bytes of cuDNN's dP workspace per attention score (16-bit dP).
DP_WORKSPACE_BYTES = 2


def dp_workspace_bytes(
    graph: TracedGraph, table: OpTable, cfg: WorkloadConfig, cluster: Cluster
) -> npt.NDArray[np.int64]:
    """Per row of ``table``: the bytes of the workspace a deterministic cuDNN attention
    backward on Hopper allocates, and deterministic algorithms fill, before it runs (0 for
    every other row, GPU, kernel or setting)."""
    out = np.zeros(len(table), dtype=np.int64)
    kernel = resolve_kernel(cfg.model.attention_kernel, cluster.gpu.arch)
    if not (
        cfg.training.deterministic
        and cfg.model.transformer_impl == "transformer_engine"
        and kernel == "cudnn"
        and cluster.gpu.arch == "hopper"
    ):
        return out
    rows = graph.rows_named(table, ATTENTION_BACKWARD) & (table.op_class == OpClass.ATTENTION)
    for i in np.flatnonzero(rows).tolist():
        sid = int(table.shapes[i])
        shapes = parse_shapes_text(graph.strings[sid]) if sid >= 0 else None
        if not shapes or len(shapes) < 3:
            continue
        # dout and q are [b, heads, s_q, d], k is [b, kv heads, s_kv, d].
        b, heads, s_q = shapes[0][0], shapes[0][1], shapes[0][2]
        s_kv = shapes[2][2]
        out[i] = b * heads * s_q * s_kv * DP_WORKSPACE_BYTES
    return out
