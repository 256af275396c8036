"""The MoE layer of Megatron-Core (``MoELayer``), for one rank, on the meta device.

In place of the dense MLP: the router (a ``hidden x experts`` GEMM, softmax or sigmoid scores,
top-k), the permutation of each token's ``top_k`` copies into expert order (a gather; its
backward a scatter-add), the token dispatch over the expert-parallel group, the local experts
as one grouped GEMM per projection (a batched GEMM of ``experts / ep`` groups; with
``moe_grouped_gemm`` false one expert after another, as Megatron-Core's ``SequentialMLP``),
the combine back, and the unpermutation: a scatter of the copies back into token order,
weighted by the routing probabilities (a multiply and a sum over the ``top_k`` copies). Shared
experts run beside the routed ones as a dense tensor-parallel MLP.

Dispatchers (``model.dispatcher``, Megatron-Core's ``--moe-token-dispatcher-type``):

- ``alltoall``: an all-to-all(v) over the EP group each way, forward and backward (NCCL's
  grouped send/recv); with expert tensor parallelism the received tokens are then all-gathered
  over the ``etp`` group and the experts' output reduce-scattered back. With several local
  experts the received rows, which arrive ordered by source rank, are regrouped by local expert
  before the experts and back after them (:func:`regroup_chunks`);
- ``deepep``: the same traffic through DeepEP's dispatch and combine kernels;
- ``allgather``: every rank's tokens all-gathered over the EP group, each rank keeping those
  routed to its experts, and the output reduce-scattered back.

Around them, the small work Megatron-Core runs on each MoE layer's routing (its
``router.py``, ``moe_utils.py`` and ``token_dispatcher.py`` as at commit f1f03922 of 2024;
later versions run these and more, such as a scattered routing map and a second top-k for the
loss's scores):

- the load-balancing loss (``load_balancing``, default ``aux_loss``): the tokens per expert
  counted, all-reduced over the tensor-and-context parallel ranks, the scores of every expert
  in fp32, their sum over tokens times the counts; in backward the loss's own gradient (ones
  times the loss scale, ``MoEAuxLossAutoScaler``) flows back through them into the router;
- the alltoall dispatcher's ``preprocess``: the counts again, all-gathered over the expert
  tensor and expert parallel ranks, summed per rank and per local expert and copied to the
  host (the all-to-all's split sizes), then a host wait for those copies
  (``torch.cuda.current_stream().synchronize()`` before the EP all-to-all; before the
  permutation with a capacity factor; after the permutation without expert parallelism).
  The all-gather dispatcher's host wait is the copy of its tokens per expert
  (``tokens_per_expert.cpu()``) before the local permutation; DeepEP's normal kernels wait on
  the host for the received counts before the dispatch.

The busiest rank's token count sizes the GEMMs (:func:`~echo_view.sim.moe.expert_tokens`):
with routing imbalance the traced rank is the slowest one, as the step is.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from echo_view.model.config import WorkloadConfig
from echo_view.model.graph import OpClass
from echo_view.model.kinds import CollectiveKind
from echo_view.sim.moe import a2a_name, expert_tokens
from echo_view.tracing.fp8 import fp8_bmm, fp8_linear, fp8_recipe
from echo_view.tracing.fused import mlp_activation
from echo_view.tracing.layers import AG, RS, ColumnParallelLinear, RowParallelLinear, comm
from echo_view.tracing.recorder import Recorder

A2A = CollectiveKind.ALL_TO_ALL
#: The graph row of a device-to-host copy of a small result (``.to("cpu")``).
TO_HOST = "aten::_to_copy (device to host)"


class _AuxLossScaler(torch.autograd.Function):
    """Megatron-Core's ``MoEAuxLossAutoScaler``: the activation passes unchanged; in backward
    the load-balancing loss gets a gradient of its own (ones times the loss scale), which
    autograd carries back through the loss's ops to the router's logits."""

    @staticmethod
    def forward(ctx: Any, act: torch.Tensor, aux: torch.Tensor) -> torch.Tensor:
        ctx.aux_shape = aux.shape
        ctx.aux_dtype = aux.dtype
        return act

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        ones = torch.ones(ctx.aux_shape, dtype=ctx.aux_dtype, device=grad.device)
        return grad, ones * 1.0  # ``main_loss_backward_scale``


class _AllToAll(torch.autograd.Function):
    """A token all-to-all over the EP group: ``rows`` token rows out, ``ctx``-kept rows back
    in backward (the transposed traffic, recorded under the other phase's name)."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, rec: Recorder, names: tuple[str, str], rows: int, wire: int
    ) -> torch.Tensor:
        # The per-rank payload is the routed copies (T * top_k rows) either way: the routed
        # model times a combine as the dispatch's transpose.
        routed = x.shape[0] if names[0].endswith("dispatch") else rows
        ctx.rec, ctx.name, ctx.rows, ctx.routed = rec, names[1], x.shape[0], routed
        rec.collective(A2A, routed * x.shape[1] * wire, "ep", names[0])
        return x.new_empty((rows, x.shape[1]))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        nbytes = ctx.routed * grad.shape[1] * grad.element_size()
        ctx.rec.collective(A2A, nbytes, "ep", ctx.name)
        return grad.new_empty((ctx.rows, grad.shape[1])), None, None, None, None


def regroup_chunks(x: torch.Tensor, outer: int, inner: int) -> torch.Tensor:
    """``x``'s rows as ``outer x inner`` chunks, ``outer``-major, copied out ``inner``-major:
    Megatron-LM's ``sort_chunks_by_idxs`` (``torch.split`` and one ``torch.cat``), which puts the
    alltoall dispatcher's received rows (source rank-major) into local-expert order and back.
    One copy of all rows forward, one in backward (the split's gradient is a ``cat``)."""
    n = outer * inner
    rows, extra = divmod(x.shape[0], n)
    chunks = x.split_with_sizes([rows + (i < extra) for i in range(n)])
    return torch.cat([chunks[o * inner + i] for i in range(inner) for o in range(outer)])


def all_to_all(
    x: torch.Tensor, rec: Recorder, names: tuple[str, str], rows: int, wire: int
) -> torch.Tensor:
    """``x`` sent over the EP group, ``rows`` rows received; ``names``: the forward and the
    backward op's name; ``wire``: bytes per element on the wire."""
    out: torch.Tensor = _AllToAll.apply(x, rec, names, rows, wire)  # type: ignore[no-untyped-call]
    return out


class GroupedMLP(nn.Module):
    """This rank's ``experts / ep`` experts, each ``hidden -> moe_ffn_hidden / etp -> hidden``,
    over ``per_expert`` token rows each: as batched GEMMs (Transformer Engine's grouped GEMM,
    ``moe_grouped_gemm``), or one expert after another, each a pair of linear layers with
    weights of its own, the rows split off before and the outputs concatenated after
    (Megatron-Core's ``SequentialMLP``)."""

    def __init__(self, cfg: WorkloadConfig, dtype: torch.dtype, local: int) -> None:
        super().__init__()
        moe, h = cfg.model.moe, cfg.model.hidden
        assert moe is not None
        f = moe.moe_ffn_hidden // cfg.parallel.expert_tp
        self.gated = cfg.model.activation == "swiglu"
        self.grouped = moe.moe_grouped_gemm
        self.local = local
        up = cfg.model.up_projections * f
        weights: list[nn.Parameter] = []
        if self.grouped:
            self.fc1 = nn.Parameter(torch.empty(local, h, up, device="meta", dtype=dtype))
            self.fc2 = nn.Parameter(torch.empty(local, f, h, device="meta", dtype=dtype))
            weights = [self.fc1, self.fc2]
        else:
            # ``nn.Linear``'s layout (out, in), as each expert's linear layers hold them.
            self.fc1s = nn.ParameterList(
                torch.empty(up, h, device="meta", dtype=dtype) for _ in range(local)
            )
            self.fc2s = nn.ParameterList(
                torch.empty(h, f, device="meta", dtype=dtype) for _ in range(local)
            )
            weights = [*self.fc1s, *self.fc2s]
        for w in weights:
            w.expert = True  # type: ignore[attr-defined]  # reduced over expert data parallel
        self.fp8 = fp8_recipe(cfg)
        # DeepEP's FP8 dispatch delivers the tokens already quantized.
        self.cast_input = moe.dispatcher != "deepep"

    def forward(self, x: torch.Tensor, rec: Recorder) -> torch.Tensor:
        if not self.grouped:
            return self._sequential(x, rec)
        local = self.fc1.shape[0]
        x = x.reshape(local, x.shape[0] // local, x.shape[1])
        if self.fp8 is None:
            up = torch.bmm(x, self.fc1)
        else:
            up = fp8_bmm(x, self.fc1, rec, self.fp8, cast_input=self.cast_input)
        act = mlp_activation(up, self.gated)
        out = (
            torch.bmm(act, self.fc2) if self.fp8 is None else fp8_bmm(act, self.fc2, rec, self.fp8)
        )
        return out.reshape(-1, out.shape[-1])

    def _sequential(self, x: torch.Tensor, rec: Recorder) -> torch.Tensor:
        outs = []
        parts = torch.split(x, x.shape[0] // self.local)
        for rows, w1, w2 in zip(parts, self.fc1s, self.fc2s, strict=True):
            up = self._linear(rows, w1, rec, cast_input=self.cast_input)
            outs.append(self._linear(mlp_activation(up, self.gated), w2, rec))
        return torch.cat(outs)

    def _linear(
        self, x: torch.Tensor, w: torch.Tensor, rec: Recorder, *, cast_input: bool = True
    ) -> torch.Tensor:
        """One expert's linear layer: in bf16, or as a Transformer Engine FP8 linear."""
        if self.fp8 is None:
            return F.linear(x, w)
        return fp8_linear(x, w, None, rec, self.fp8, cast_input=cast_input)

    def fp8_weights(self) -> tuple[int, ...]:
        """Element counts of the FP8 weights TE quantizes once per step (none without FP8)."""
        if self.fp8 is None:
            return ()
        if self.grouped:
            return (int(self.fc1.numel()), int(self.fc2.numel()))
        return tuple(int(w.numel()) for w in (*self.fc1s, *self.fc2s))


class MoELayer(nn.Module):
    """Router, dispatch, local experts, combine and shared experts (module docstring)."""

    def __init__(self, rec: Recorder, cfg: WorkloadConfig, dtype: torch.dtype) -> None:
        super().__init__()
        moe, p, h = cfg.model.moe, cfg.parallel, cfg.model.hidden
        assert moe is not None
        self.rec, self.moe, self.ep, self.etp = rec, moe, p.ep, p.expert_tp
        self.tokens = expert_tokens(cfg)
        self.router = nn.Parameter(torch.empty(moe.experts, h, device="meta", dtype=dtype))
        self.experts = GroupedMLP(cfg, dtype, self.tokens.local_experts)
        # DeepEP dispatches FP8 tokens in FP8 training (DeepSeek-V3), combines in BF16.
        self.dispatch_wire = 1 if moe.dispatcher == "deepep" and cfg.dtype == "fp8" else None
        self.shared: tuple[ColumnParallelLinear, RowParallelLinear] | None = None
        if moe.shared_ffn_hidden:
            up = cfg.model.up_projections * moe.shared_ffn_hidden
            sp = p.sequence_parallel
            fp8 = fp8_recipe(cfg)
            bias = cfg.model.add_bias_linear
            self.shared_fc1 = ColumnParallelLinear(rec, h, up, p.tp, sp, dtype, bias, fp8=fp8)
            self.shared_fc2 = RowParallelLinear(
                rec, moe.shared_ffn_hidden, h, p.tp, sp, dtype, fp8, bias=bias
            )
            self.shared = (self.shared_fc1, self.shared_fc2)
        self.gated = cfg.model.activation == "swiglu"
        self.tp_cp = p.tp * p.cp
        # Megatron-Core's aux-loss tracker: one value per layer, summed over micro-batches.
        self.tracked = torch.zeros((), device="meta", dtype=torch.float32)

    def _route(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = F.linear(tokens, self.router)
        scores = logits.softmax(-1) if self.moe.router == "softmax" else logits.sigmoid()
        probs, index = torch.topk(scores, self.moe.top_k, dim=-1)
        if self.moe.load_balancing != "none":
            probs = self._aux_loss(logits, index, probs)
        return probs, index.reshape(-1)

    def _counts(self, index: torch.Tensor) -> torch.Tensor:
        """Tokens per expert (``torch.histc`` of the routed experts)."""
        e = self.moe.experts
        return torch.histc(index, bins=e, min=0, max=e)

    def _aux_loss(
        self, logits: torch.Tensor, index: torch.Tensor, probs: torch.Tensor
    ) -> torch.Tensor:
        """The load-balancing loss attached to ``probs`` (module docstring)."""
        counts = self._counts(index)
        if self.tp_cp > 1:
            nbytes = int(counts.numel()) * counts.element_size()
            self.rec.collective(CollectiveKind.ALL_REDUCE, nbytes, "tp_cp")
        if self.moe.router == "softmax":
            scores = torch.softmax(logits, dim=-1, dtype=torch.float32)
        else:
            scores = torch.sigmoid(logits.float())
            scores = scores / (scores.sum(-1, keepdim=True) + 1e-20)
        # Scaled by the loss coefficient (Megatron's --moe-aux-loss-coeff: its value changes
        # no kernel), and divided by it again for the tracker's logged copy.
        coeff = 1e-2
        aux = torch.sum(scores.sum(0) * counts) * coeff
        with torch.no_grad():
            self.tracked.add_(aux.detach() / coeff)
        out: torch.Tensor = _AuxLossScaler.apply(probs, aux)  # type: ignore[no-untyped-call]
        return out

    def _to_host(self, t: torch.Tensor) -> None:
        """A device-to-host copy of the small tensor ``t``."""
        nbytes = int(t.numel()) * t.element_size()
        self.rec.op(TO_HOST, OpClass.COPY, flops=0.0, nbytes=2 * nbytes, dtype="i64")

    def _split_sizes(self, index: torch.Tensor) -> None:
        """The alltoall dispatcher's ``preprocess``: how many token copies go to and come from
        each rank and local expert, copied to the host (module docstring)."""
        counts = self._counts(index)
        local = self.tokens.local_experts
        if self.ep * self.etp == 1:
            self._to_host(counts)
            return
        self._to_host(counts.reshape(self.ep, -1).sum(1))  # the split sizes sent
        group = self.ep * self.etp
        nbytes = group * int(counts.numel()) * counts.element_size()
        self.rec.collective(CollectiveKind.ALL_GATHER, nbytes, "etp_ep")
        everyone = counts.new_empty((self.etp, self.ep, counts.shape[0]))
        per_local = everyone[:, :, :local].contiguous()  # to this rank's experts
        per_rank = per_local.sum(2)
        self._to_host(per_rank[0])  # the split sizes received
        self._to_host(per_rank.sum(1))  # and over expert tensor parallel ranks
        self._to_host(per_local.sum((0, 1)))  # tokens per local expert
        if local > 1:
            self._to_host(per_local)  # per source rank and local expert (the regrouping)

    def _local(self, x: torch.Tensor, regroup: bool = False, wait: bool = False) -> torch.Tensor:
        """The local experts on their received rows, gathered over expert tensor parallel
        ranks before and reduce-scattered after; ``regroup``: the gathered rows arrive ordered
        by source rank (``ep * etp`` of them) and are regrouped by local expert and back;
        ``wait``: the host waits for the GPU before the experts run."""
        x = comm(x, self.rec, AG, RS, self.etp, axis="etp")
        local, sources = self.tokens.local_experts, self.ep * self.etp
        regroup = regroup and local > 1
        if regroup:
            x = regroup_chunks(x, sources, local)
        if wait:
            self.rec.host_wait()
        y = self.experts(x, self.rec)
        if regroup:
            y = regroup_chunks(y, local, sources)
        return comm(y, self.rec, RS, AG, self.etp, axis="etp")

    def _wait_point(self) -> str:
        """Where the host waits for the split sizes (Megatron-Core's ``cuda_sync_point``):
        ``permute`` with a capacity factor, ``dispatch`` with expert parallelism or several
        local experts (and before DeepEP's dispatch), ``end`` of the dispatch otherwise."""
        if self.moe.dispatcher != "alltoall":
            return "dispatch"
        if self.moe.capacity_factor is not None:
            return "permute"
        return "dispatch" if self.ep > 1 or self.tokens.local_experts > 1 else "end"

    def _alltoall(self, tokens: torch.Tensor, probs: torch.Tensor, index: torch.Tensor) -> Any:
        """Permute, dispatch, experts, combine, unpermute: ``[T, h]`` in and out."""
        t, rec, k = self.tokens, self.rec, self.moe.top_k
        nccl = self.moe.dispatcher == "alltoall"
        if nccl:
            self._split_sizes(index)
        wait = self._wait_point()
        if wait == "permute":
            rec.host_wait()
        permuted = tokens.index_select(0, index)  # top_k copies of each token in expert order
        dispatch, combine = a2a_name(self.moe, "dispatch"), a2a_name(self.moe, "combine")
        elem = permuted.element_size()
        if wait == "dispatch":
            rec.host_wait()
        x = all_to_all(permuted, rec, (dispatch, combine), t.received, self.dispatch_wire or elem)
        local = self._local(x, regroup=nccl, wait=wait == "end")
        y = all_to_all(local, rec, (combine, dispatch), t.routed, elem)
        if nccl:
            # Megatron-LM's unpermute scatters the copies back into token order (``moe_scatter``,
            # a gather in backward) before weighting them.
            y = y.index_select(0, index)
        # Each token's copies weighted by their probabilities and summed.
        return (y.reshape(-1, k, y.shape[-1]) * probs.to(y.dtype).unsqueeze(-1)).sum(1)

    def _allgather(self, tokens: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """Megatron-Core's all-gather dispatcher: the EP group's tokens gathered, this rank's
        experts' copies permuted out of them, the weighted output scattered back into the
        gathered rows and reduce-scattered."""
        rec, received = self.rec, self.tokens.received
        gathered = comm(tokens, rec, AG, RS, self.ep, axis="ep")
        weights = comm(probs.to(tokens.dtype), rec, AG, RS, self.ep, axis="ep").reshape(-1)
        keep = torch.empty(received, dtype=torch.int64, device="meta")
        counts = self._counts(keep)  # tokens per local expert, read on the host
        self._to_host(counts[: self.tokens.local_experts])
        rec.host_wait()
        y = self._local(gathered.index_select(0, keep))
        y = y * weights.index_select(0, keep).unsqueeze(-1)
        back = gathered.new_zeros(gathered.shape).index_add(0, keep, y)
        return comm(back, rec, RS, AG, self.ep, axis="ep")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, h = x.shape
        tokens = x.reshape(s * b, h)
        probs, index = self._route(tokens)
        if self.moe.dispatcher == "allgather":
            y = self._allgather(tokens, probs)
        else:
            y = self._alltoall(tokens, probs, index)
        if self.shared is not None:
            up = self.shared_fc1(x)
            act = mlp_activation(up, self.gated)
            y = y + self.shared_fc2(act).reshape(s * b, h)
        return y.reshape(s, b, h)
