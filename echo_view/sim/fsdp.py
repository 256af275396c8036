"""PyTorch FSDP (``[parallel] fsdp``) as a composed rank program.

FSDP shards parameters, gradients and optimizer states over the data- and context-parallel
ranks (``FULL_SHARD``, ZeRO-3), or gradients and optimizer states only (``SHARD_GRAD_OP``,
ZeRO-2), and works unit by unit. As llm-foundry wraps a model (``fsdp_wrap_fn``: one unit per
transformer block; the root unit holds the embeddings and the final norm), per micro-batch:

- **forward**: each unit's parameters are all-gathered before its forward. The gathers run on
  their own stream and are issued as the CPU reaches each unit, ahead of the GPU, so unit
  ``k + 1``'s gather overlaps unit ``k``'s compute; the first cannot overlap anything (PyTorch
  "FSDP Notes", implicit forward prefetching; ``forward_prefetch`` is off by default). With
  ``full_shard`` a block's parameters are freed after its forward; the root's stay gathered
  until after the backward (``_post_forward_reshard`` in ``torch/distributed/fsdp/
  _runtime_utils.py``: the root is not resharded after forward).
- **backward**: with ``full_shard`` each block is gathered again (with activation
  checkpointing the same gather serves the recomputed forward); the next block's gather is
  prefetched while the current one computes and is queued before the current block's
  reduce-scatter (``BACKWARD_PRE`` and ``BACKWARD_POST`` both issue it before that
  reduce-scatter). A block's gradients are reduce-scattered as soon as its backward ends, the
  root's after the whole backward. ``shard_grad_op`` keeps every gathered parameter until
  after the backward: no backward gathers.
- **rate limiter** (``limit_all_gathers``, default true; llm-foundry sets it): the CPU waits
  before a gather until the unit gathered two before it has been freed, so a gather starts no
  earlier than the end of the compute of the unit gathered two before it. Under
  ``shard_grad_op`` nothing is freed in forward and the limiter does not bind.

All collectives of the data-parallel process group run on one NCCL stream in issue order (the
data-parallel lane here). Gradients are reduced every micro-batch: Composer applies
``no_sync`` only to DDP-wrapped models (``ddp_sync_context`` in ``composer/distributed/
dist_strategy.py``). Parameters are gathered in the training dtype (bf16 for fp8) and
gradients reduce-scattered in :func:`~echo_view.model.config.grad_reduce_bytes` (llm-foundry's
``mixed_precision: PURE`` reduces in bf16: ``grad_reduce_in_fp32 = false``). The optimizer
steps the local shard (the traced sharded optimizer); no parameter gather follows it.

A pass's op table is one per model chunk, so it is cut into as many parts as the model has
layers, of equal time (:func:`~echo_view.sim.compose_costs.time_cuts`): the embedding, the
output layer and the loss are spread over the layers' parts. Unit sizes come from
:func:`~echo_view.sim.memory.layer_params`; the root holds the rest of the rank's parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from echo_view.model.config import WorkloadConfig, chunk_layers, grad_reduce_bytes
from echo_view.model.dtypes import dtype_bytes
from echo_view.model.kinds import CollectiveKind
from echo_view.sim.compose_costs import TableCost, time_cuts
from echo_view.sim.memory import layer_params
from echo_view.sim.schedule import schedule

if TYPE_CHECKING:
    from echo_view.sim.compose import _Composer

AG, RS = CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER


@dataclass(frozen=True)
class FsdpPlan:
    """What one rank gathers and reduce-scatters, per unit, over ``group``."""

    group: tuple[int, ...]
    layers: int
    layer_params: int
    root_params: int
    gather_bytes: int
    reduce_bytes: int
    #: ``full_shard``: blocks are freed after forward and gathered again for backward.
    regather: bool


def fsdp_plan(
    cfg: WorkloadConfig, params: int, group: tuple[int, ...], layers: int | None = None
) -> FsdpPlan:
    """The plan of a rank holding ``params`` parameters and ``layers`` transformer layers
    (default all of them: ``pp = 1``)."""
    layers = cfg.model.layers if layers is None else layers
    per_layer = layer_params(cfg.model, cfg.parallel.tp)
    if layers and per_layer * layers > params:  # a graph whose layers differ from the formula's
        per_layer = params // layers
    elem = dtype_bytes("bf16" if cfg.dtype == "fp8" else cfg.dtype) or 2
    return FsdpPlan(
        group,
        layers,
        per_layer,
        params - per_layer * layers,
        elem,
        grad_reduce_bytes(cfg),
        cfg.parallel.fsdp == "full_shard",
    )


def spread(units: int, parts: int) -> list[int]:
    """``units`` split over ``parts`` consecutive parts as evenly as possible."""
    base, extra = divmod(units, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]


class FsdpRank:
    """Builds one rank's FSDP step on a :class:`~echo_view.sim.compose._Composer`."""

    def __init__(self, comp: _Composer, rank: int, role_idx: int, lanes: tuple[int, int]) -> None:
        self.comp, self.rank, self.role_idx = comp, rank, role_idx
        self.compute, self.dpl = lanes
        role = comp.graph.roles[role_idx]
        group = comp.layout.group("dp_cp", rank)
        self.stage = comp.layout.coords(rank)[0]
        #: Transformer layers of each local model chunk.
        self.chunk_layers = chunk_layers(comp.cfg, self.stage)
        layers = sum(self.chunk_layers)
        plan = fsdp_plan(comp.cfg, role.params, group, layers) if len(group) > 1 else None
        self.plan = plan
        #: End op of each gathered part's compute, in gather order (the rate limiter's queue).
        self.freed: list[int] = []
        self.gathers = 0
        self.last_comm = -1
        #: Local chunks whose layers' / root's parameters are gathered now (pipeline
        #: parallelism; they differ only under ``full_shard`` with ``every_microbatch``).
        self.gathered: set[int] = set()
        self.root_gathered: set[int] = set()

    def comm(self, kind: CollectiveKind, params: int, what: str) -> int:
        """One all-gather (``params`` in the training dtype) or reduce-scatter (gradients in
        the reduction dtype) on the data-parallel lane."""
        plan = self.plan
        assert plan is not None
        nbytes = params * (plan.gather_bytes if kind == AG else plan.reduce_bytes)
        self.last_comm = self.comp.comm_op(
            self.rank, self.dpl, kind, nbytes, plan.group, f"fsdp {what}"
        )
        return self.last_comm

    def gather(self, params: int, what: str, limited: bool) -> int:
        """A unit's all-gather; with the rate limiter it waits for the compute of the part
        gathered two before it."""
        op = self.comm(AG, params, what)
        if limited and self.gathers >= 2:
            self.comp.edges.append((self.freed[self.gathers - 2], op))
        self.gathers += 1
        return op

    def run_pass(self, tc: TableCost, label: str, forward: bool) -> None:
        """One pass of the whole model (pp = 1): every forward gathers (the root too), every
        backward reduce-scatters and, with ``full_shard``, gathers again."""
        plan = self.plan
        if plan is None:
            self.comp.emit_table(self.rank, self.compute, tc, label, 0, len(tc.table))
            return
        gathers = forward or plan.regather
        units = (plan.layers, plan.root_params)
        self.unit_pass(tc, label, units, (gathers, forward, not forward), plan.regather)

    def unit_pass(
        self,
        tc: TableCost,
        label: str,
        units: tuple[int, int],
        acts: tuple[bool, bool, bool],
        limited: bool,
    ) -> tuple[int, int]:
        """One pass over ``units`` (transformer layers, parameters outside them), cut into one
        piece a layer; ``acts``: whether the layers' parameters are gathered first (each
        unit's gather issued as the piece before it starts, ``limited`` by the rate limiter),
        whether the root's are, and whether the gradients are reduce-scattered as each piece
        ends. Returns the pass's first and last op."""
        comp, plan, rank = self.comp, self.plan, self.rank
        assert plan is not None
        layers, root = units
        gathers, gather_root, reduces = acts
        cuts = time_cuts(tc, max(1, layers))
        parts = spread(layers, len(cuts))
        root_ag = self.comm(AG, root, f"params root, {label}") if gather_root and root else -1
        ags: list[int] = []

        def unit_gather(k: int) -> None:
            params = parts[k] * plan.layer_params
            ags.append(self.gather(params, f"params {label} unit {k}", limited) if params else -1)

        if gathers:
            unit_gather(0)
        lo, first, end = 0, -1, -1
        for k, hi in enumerate(cuts):
            if gathers and k + 1 < len(cuts):
                unit_gather(k + 1)
            start = len(comp.c.rank)
            end = comp.emit_table(rank, self.compute, tc, f"{label} unit {k}", lo, hi)
            lo = hi
            if first < 0:
                first = start
                if root_ag >= 0:
                    comp.edges.append((root_ag, start))
            if gathers:
                if ags[k] >= 0:
                    comp.edges.append((ags[k], start))
                self.freed.append(end)
            if reduces and parts[k]:
                rs = self.comm(RS, parts[k] * plan.layer_params, f"grads {label} unit {k}")
                comp.edges.append((end, rs))
        if reduces and root:
            comp.edges.append((end, self.comm(RS, root, f"grads root, {label}")))
        return first, end

    def units(self, chunk: int) -> tuple[int, int]:
        """(transformer layers, other parameters) of local ``chunk``: the parameters outside
        the layers (the embedding on the first stage, the output layer on the last) belong to
        the stage's first chunk on stage 0 and to its last chunk elsewhere."""
        plan = self.plan
        root = plan.root_params if plan is not None else 0
        home = 0 if self.stage == 0 else len(self.chunk_layers) - 1
        return self.chunk_layers[chunk], root if chunk == home else 0

    def chunk_pass(
        self, tc: TableCost, label: str, forward: bool, chunk: int, last: bool
    ) -> tuple[int, int]:
        """One pass of local model ``chunk`` under pipeline parallelism (``last``: the
        chunk's last backward of the step); returns the pass's first and last op. Each chunk
        is an FSDP module of its own, whose parameters are gathered unit by unit where they
        are sharded, before the pass:

        - ``last_microbatch`` (``torch.distributed.pipelining``, as torchtitan runs FSDP2
          under pipeline parallelism: no resharding after forward, and gradient sync and
          resharding after backward only on the last backward): gathered at the chunk's first
          forward and kept to its last backward, which reduce-scatters the gradients that the
          step's backwards accumulated, unit by unit as each unit's backward ends;
        - ``every_microbatch`` (FSDP without ``no_sync``): every backward reduce-scatters and
          reshards; ``shard_grad_op`` keeps the parameters from a forward until a backward
          ends, so a forward or backward finds them gathered unless a backward has freed them
          since; ``full_shard`` frees the layers' after every forward too, but not the
          root's (the chunk is its own FSDP root, which is not resharded after forward, as
          with ``pp = 1``): a backward gathers the root only after another backward."""
        comp, plan = self.comp, self.plan
        if plan is None:
            first = len(comp.c.rank)
            return first, comp.emit_table(self.rank, self.compute, tc, label, 0, len(tc.table))
        every = comp.cfg.parallel.fsdp_sync == "every_microbatch"
        regather = every and plan.regather
        reshards = not forward and (every or last)
        acts = (regather or chunk not in self.gathered, chunk not in self.root_gathered, reshards)
        out = self.unit_pass(tc, label, self.units(chunk), acts, regather)
        if forward:
            self.root_gathered.add(chunk)
            if not regather:
                self.gathered.add(chunk)
        elif reshards:
            self.gathered.discard(chunk)
            self.root_gathered.discard(chunk)
        return out

    def run(self, microbatches: int) -> None:
        """Every micro-batch's forward and backward (pp = 1), then the optimizer on the
        shard once the last reduce-scatter has ended."""
        comp = self.comp
        for ps in schedule(0, 1, microbatches):
            phase = "forward" if ps.forward else "backward"
            tc = comp.costs[(self.role_idx, phase, 0)]
            self.run_pass(tc, f"{phase} chunk 0 mb {ps.microbatch}", ps.forward)
        opt = comp.costs[(self.role_idx, "optimizer", 0)]
        first_opt = len(comp.c.rank)
        comp.emit_table(self.rank, self.compute, opt, "optimizer", 0, len(opt.table))
        if self.last_comm >= 0:
            comp.edges.append((self.last_comm, first_opt))
