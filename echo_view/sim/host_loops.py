"""The optimizer step's loops over parameter tensors on the host.

Some training programs launch kernels one parameter tensor at a time around the optimizer
step, each launch costing the host ``host.kernel_us`` (:mod:`echo_view.sim.host`); some of
them read a result on the host, which waits for the GPU. Which loops a rank runs follows its
config's ``[training]`` keys (docs/workloads.md, "Host path"):

- Megatron's ``count_zeros_fp32`` (``log_num_zeros_in_grad``), after the gradient norm's read;
- Megatron-LM of 2019's gradient checks (``grad_checks = "per_tensor"``);
- Megatron-LM of 2019's ``FP16_Optimizer`` copies (``master_copies = "per_tensor"``);
- Megatron-LM of 2019's gradient all-reduce through a flat copy (``grad_allreduce =
  "flatten"``), whose copies back into the gradients come after a wait for the GPU;
- Megatron-Core's copies of the updated bf16 params, one ``copy_`` per tensor
  (:attr:`~echo_view.model.config.WorkloadConfig.per_tensor_param_copies`);
- Megatron-LM's parameter norm after the step (``log_params_norm``), a fixed number of
  launches and a read that waits for the GPU.

A rank's parameter tensors are the traced graph's count for its role (``meta.param_tensors``),
a shard of them (split evenly) where the optimizer is sharded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from echo_view.model.graph import TracedGraph
from echo_view.model.kinds import EventKind

if TYPE_CHECKING:
    from echo_view.sim.compose import _Composer

#: Kernel launches per gradient tensor of Megatron's ``count_zeros_fp32``
#: (``megatron/core/optimizer/clip_grads.py``): ``count_nonzero``, ``numel -``, ``+=``.
COUNT_ZEROS_LAUNCHES = 3
#: Kernel launches per gradient tensor of Megatron-LM's 2019 gradient checks
#: (``[training] grad_checks = "per_tensor"``): the overflow check ``float(x.float().sum())``
#: (a cast, a sum, the copy to the host) and, when clipping, the norm ``p.grad.data.norm(2)``
#: read by ``.item()`` (the norm, the copy); each copy waits for the GPU.
PER_TENSOR_CHECK_LAUNCHES, PER_TENSOR_NORM_LAUNCHES = 3, 2
#: Kernel launches per parameter tensor of Megatron-LM's 2019 ``FP16_Optimizer``
#: (``[training] master_copies = "per_tensor"``; fp16/fp16.py, fp16/fp16util.py at
#: NVIDIA/Megatron-LM a0368ddf): the fp16 gradient copied into the fp32 master gradient and
#: divided by the loss scale (after the overflow check, before the norm), the updated master
#: param copied back (after the optimizer), and the master and model gradients zeroed (at
#: the start of the next backward, ``backward_step``'s ``optimizer.zero_grad()``).
MASTER_GRAD_LAUNCHES, MASTER_PARAM_LAUNCHES, ZERO_GRAD_LAUNCHES = 2, 1, 2
#: Kernel launches per parameter tensor of Megatron-LM's 2019 ``allreduce_params``
#: (``[training] grad_allreduce = "flatten"``; model/distributed.py at a0368ddf): after the
#: all-reduce and ``torch.cuda.synchronize()``, ``buf.copy_(synced)`` for each gradient.
UNFLATTEN_LAUNCHES = 1
#: Kernel launches of Megatron-LM's ``calc_params_l2_norm`` (``--log-params-norm``;
#: megatron/training/utils/common_utils.py at d98e8a64, the commit of the CI golden values) on
#: a dense model, run after each step (``train`` in megatron/training/training.py): of its
#: eight norm buckets, the one holding the main params takes ``torch.tensor([0])`` (a copy to
#: the GPU), ``multi_tensor_l2norm`` (its kernel and a clean-up kernel) and ``norm * norm``
#: (4), the seven empty ones ``torch.zeros`` each (7); five all-reduces of the partial sums
#: (the four sharded buckets' and the expert tensor-parallel one), seven additions combining
#: them, the model-parallel all-reduce, and ``.item()``'s copy to the host (14). The read
#: waits for the GPU. The norm kernels' own GPU time (one pass over the fp32 main params) is
#: left out: the read drains the GPU in any case.
PARAMS_NORM_LAUNCHES = 4 + 7 + 14


def param_tensors(graph: TracedGraph, role_idx: int) -> int:
    """The parameter tensors of a role: as the tracer counted them (graph ``meta``), else, for
    a graph traced before it did, the backward rows where gradients complete (which count
    once the tensors completing at the same kernel: a layer norm's weight and bias)."""
    role = graph.roles[role_idx]
    counted = graph.meta.get("param_tensors", {}).get(str(role.stages[0]))
    if counted is not None:
        return int(counted)
    return sum(int((t.grad_bytes > 0).sum()) for t in role.backward)


class HostLoops:
    """One rank's per-tensor host loops, placed on its host thread as the composer reaches
    them. ``shard_group``: the ranks its optimizer's tensors are sharded over (empty when it
    steps them all)."""

    def __init__(
        self, comp: _Composer, rank: int, role_idx: int, shard_group: tuple[int, ...]
    ) -> None:
        self.comp, self.rank = comp, rank
        self.cfg = comp.cfg
        self.copies = comp.cfg.per_tensor_master_copies
        self.param_copies = comp.cfg.per_tensor_param_copies
        self.tensors = -(-param_tensors(comp.graph, role_idx) // max(1, len(shard_group)))
        self.zeroed = False

    def launch(self, per: int, what: str, *, sync: bool = True, tensors: int | None = None) -> None:
        """``per`` host launches for each of the rank's tensors (``tensors`` of them when
        given), then, with ``sync``, a wait for the GPU."""
        comp = self.comp
        lane = comp.host_lane.get(self.rank)
        count = self.tensors if tensors is None else tensors
        if lane is None or not count:
            return
        launches = per * count
        name = f"{what} ({launches} launches)"
        comp.op(self.rank, lane, name, launches * comp.host_ns, kind=EventKind.CPU_OP, issue=False)
        if sync:
            comp.host_sync(self.rank)

    def backward_starts(self) -> None:
        """The step's first backward pass begins: ``FP16_Optimizer.zero_grad()`` opens it
        (pretrain_gpt2.py of 2019, ``backward_step``); its GPU work is the optimizer's
        ``zero_grad`` row. None of it waits, so a host ahead of the forward hides it."""
        if self.copies and not self.zeroed:
            self.zeroed = True
            self.launch(ZERO_GRAD_LAUNCHES, "zero_grad", sync=False)

    def before_optimizer(self) -> None:
        """After the backward and the gradient reduction: the 2019 copies out of the flat
        gradient, the gradient norm's or zero count's read (Megatron's ``.item()``), the zero
        count, the 2019 checks, then the 2019 copies of the gradients into fp32 (which wait
        for nothing)."""
        training = self.cfg.training
        if training.grad_allreduce == "flatten":
            # The host waits for the all-reduce, then copies each gradient back.
            self.comp.host_sync(self.rank)
            self.launch(UNFLATTEN_LAUNCHES, "ddp unflatten", sync=False)
        if training.optimizer_sync:
            self.comp.host_sync(self.rank)
            if training.log_num_zeros_in_grad:
                # Per gradient tensor a count_nonzero, a subtraction from the element count
                # and an accumulation, then a .item().
                self.launch(COUNT_ZEROS_LAUNCHES, "count_zeros_fp32")
        if training.grad_checks == "per_tensor":
            # Per gradient tensor an overflow check and, when clipping, a norm, each read on
            # the host (fp16/loss_scaler.py has_overflow_serial, mpu/grads.py clip_grad_norm).
            # Each read drains the GPU, whose share of the chain (a cast, a sum and a norm of
            # one tensor) is left out: the host issues the next tensor's kernels after it.
            per = PER_TENSOR_CHECK_LAUNCHES
            if training.clip_grad > 0:
                per += PER_TENSOR_NORM_LAUNCHES
            self.launch(per, "per-tensor gradient checks")
        if self.copies:
            self.launch(MASTER_GRAD_LAUNCHES, "master grads", sync=False)

    def step_ends(self) -> None:
        """The step's work is issued: Megatron-LM's parameter norm (``log_params_norm``),
        whose ``.item()`` waits for the GPU."""
        if self.cfg.training.log_params_norm:
            self.launch(PARAMS_NORM_LAUNCHES, "params norm", tensors=1)

    def after_optimizer(self) -> None:
        """The optimizer's kernels are issued: the 2019 copies of the params back to fp16, or
        Megatron-Core's bf16 copies, one per tensor, whose GPU work is the traced
        ``copy_main_params`` row (issued as one kernel: the other tensors' launches here)."""
        if self.copies:
            self.launch(MASTER_PARAM_LAUNCHES, "master params", sync=False)
        elif self.param_copies and self.tensors > 1:
            self.launch(1, "bf16 param copies", sync=False, tensors=self.tensors - 1)
