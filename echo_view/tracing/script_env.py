"""The world a user's training script runs in when it is traced: one rank of a fake process
group, fake tensors, and the few adaptations PyTorch's distributed code needs to run on them.

Fake tensors hold shapes and dtypes, no values, so code that reads values on the host cannot
run on them. Three places in ``torch.distributed`` do, and are adapted while a script is
traced (and restored afterwards):

- a :class:`~torch.distributed.device_mesh.DeviceMesh` keeps its rank layout in a small host
  tensor and computes coordinates from it: its methods (and ``init_device_mesh``) run with the
  fake mode suspended, on real tensors;
- DTensor derives an op's output shape by running the op on fake tensors of the global
  shapes: that run happens with the tracer's modes suspended, so that only the op on the local
  shards (what a GPU runs) is recorded;
- DDP compares parameter shapes across ranks by reading a tensor of sizes: the check is
  skipped (every fake rank builds the same model);
- DDP's built-in all-reduce hook returns the fake backend's empty result: it is replaced by a
  hook that all-reduces each gradient bucket through ``torch.distributed.all_reduce``, the
  same collective on the same bucket. (Without a hook DDP divides each gradient while it
  copies it into its bucket, ``mul_out``, and the hook path copies it, ``copy_``: one kernel
  of the same bytes either way, so the hook divides nothing.)
- DDP puts every gradient in one bucket for its first iteration and rebuilds its buckets
  after it (``DistributedDataParallel._ddp_init_helper``, ``compute_bucket_size_limits``):
  the traced step, which stands for every step, gets the buckets of the later steps: filled in
  the order the gradients become ready (``_ready_order_buckets``), a first one of 1 MiB when
  ``bucket_cap_mb`` is left at its default, then ``bucket_cap_mb`` each.

``torch.distributed.init_process_group`` called by the script is a no-op (the fake group is up).
Utilities that take their foreach (multi-tensor) path only for tensors of plain type
(``torch.nn.utils.clip_grad_norm_``: ``_has_foreach_support`` in
``torch/utils/_foreach_utils.py``) take it for fake tensors too, as they do for the script's
tensors on a GPU (and a CPU), instead of a loop of one kernel per tensor. Optimizers built
without ``foreach`` or ``fused`` take the path they default to on a GPU, foreach
(``_default_to_fused_or_foreach`` in ``torch/optim/optimizer.py``, which gives CPU tensors, as
the fake ones are, the one-kernel-per-tensor loop: 120 traced ops for AdamW on 12 parameter
tensors where a GPU runs 9). ``F.dropout`` in
training runs PyTorch's fused GPU kernel (``native_dropout``), as on a GPU. ``Module.to`` to
where the module already is (``model.to(device)`` with the CPU) returns it: fake parameters
cannot be converted, not even to their own device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torch.utils._foreach_utils as foreach_utils
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, unset_fake_temporarily
from torch.distributed.tensor._sharding_prop import ShardingPropagator
from torch.utils._python_dispatch import _disable_current_modes

from echo_view.tracing.fused import dropout as fused_dropout


def _within(context: Callable[[], Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run inside ``context()`` (suspending the fake mode, or every mode)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with context():
            return fn(*args, **kwargs)

    return run


def _unfaked(fn: Callable[..., Any]) -> Callable[..., Any]:
    return _within(unset_fake_temporarily, fn)


def _ddp_bucket_hook(process_group: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    """DDP's default: all-reduce the bucket (module docstring: the division is elsewhere)."""
    buf = bucket.buffer()
    dist.all_reduce(buf, group=process_group, async_op=True)
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(buf)
    return fut


# DDP checks a hook's annotations as objects (this module's are postponed strings).
_ddp_bucket_hook.__annotations__ = {
    "process_group": Any,
    "bucket": dist.GradBucket,  # type: ignore[attr-defined]
    "return": torch.futures.Future[torch.Tensor],
}


@contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    # A class's own attribute as stored (a staticmethod object, not the bare function).
    old = vars(obj)[name] if isinstance(obj, type) else getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextmanager
def _adapted_torch() -> Iterator[None]:
    import torch.distributed.device_mesh as device_mesh
    import torch.nn.parallel.distributed as ddp

    with ExitStack() as stack:
        mesh_cls = device_mesh.DeviceMesh
        for name, attr in list(vars(mesh_cls).items()):
            if isinstance(attr, (staticmethod, classmethod)):
                wrapped = type(attr)(_unfaked(attr.__func__))
                stack.enter_context(_patched(mesh_cls, name, wrapped))
            elif callable(attr) and not isinstance(attr, type):
                stack.enter_context(_patched(mesh_cls, name, _unfaked(attr)))
        stack.enter_context(
            _patched(device_mesh, "init_device_mesh", _unfaked(device_mesh.init_device_mesh))
        )
        stack.enter_context(
            _patched(ddp, "_verify_param_shape_across_processes", lambda *a, **k: None)
        )
        prop = ShardingPropagator._propagate_tensor_meta_non_cached
        stack.enter_context(
            _patched(
                ShardingPropagator,
                "_propagate_tensor_meta_non_cached",
                _within(_disable_current_modes, prop),
            )
        )
        ddp_init = ddp.DistributedDataParallel.__init__

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            ddp_init(self, *args, **kwargs)
            self.register_comm_hook(self.process_group, _ddp_bucket_hook)

        stack.enter_context(_patched(ddp.DistributedDataParallel, "__init__", init))
        limits = ddp._BucketCapacityConfig.compute_bucket_size_limits

        def steady_buckets(self: Any, static_graph: bool, find_unused_parameters: bool) -> Any:
            # The rebuilt buckets' limits (Reducer::rebuild_buckets): a first bucket of
            # first_bucket_bytes_cap (1 MiB when bucket_cap_mb is left at its default, else
            # bucket_cap_mb), then bucket_cap_mb each.
            if getattr(self, "has_custom_per_bucket_caps", False):
                return limits(self, static_graph, find_unused_parameters)
            first, cap = self.first_bucket_bytes_cap, self.bucket_bytes_cap
            return ([first, cap] if first < cap else [cap]), []

        stack.enter_context(
            _patched(ddp._BucketCapacityConfig, "compute_bucket_size_limits", steady_buckets)
        )
        stack.enter_context(
            _patched(
                dist,
                "_compute_bucket_assignment_by_size",
                _ready_order_buckets(dist._compute_bucket_assignment_by_size),  # type: ignore[attr-defined]
            )
        )
        stack.enter_context(_patched(dist, "init_process_group", lambda *a, **k: None))
        supported = [*foreach_utils._foreach_supported_types, FakeTensor]
        stack.enter_context(_patched(foreach_utils, "_foreach_supported_types", supported))
        for module in _optimizer_modules():
            stack.enter_context(_patched(module, "_default_to_fused_or_foreach", _gpu_default))
        stack.enter_context(_patched(F, "dropout", _gpu_dropout(F.dropout)))
        stack.enter_context(_patched(torch.nn.Module, "to", _to_where_it_is(torch.nn.Module.to)))
        yield


def _ready_order_buckets(assign: Callable[..., Any]) -> Callable[..., Any]:
    """DDP's bucket assignment as its reducer rebuilds it after the first step: filled in the
    order the gradients become ready (for a model run in its definition order, from its last
    parameter; ``Reducer::rebuild_buckets``), so that the partial bucket holds the first
    parameters and is reduced last (PyTorch 2.13, two gloo processes, 8 linears of 2,099,200
    bytes under a 5 MiB cap: 6,297,600, 6,297,600 and 4,198,400 bytes, where assigning in
    parameter order gave 4,200,448 first). Returned reversed, as DDP reverses what it gets
    (to approximate that order)."""

    @functools.wraps(assign)
    def run(params: Any, limits: Any, sparse: Any, *rest: Any) -> Any:
        n = len(params)
        buckets, caps = assign(list(reversed(params)), limits, list(reversed(sparse)), *rest)
        ready = [[n - 1 - int(i) for i in bucket] for bucket in buckets]
        return list(reversed(ready)), list(reversed(caps))

    return run


def _to_where_it_is(module_to: Callable[..., Any]) -> Callable[..., Any]:
    """``Module.to`` that returns the module when it moves nothing (``model.to(device)`` with
    the CPU the fake tensors are on, the dtype they have): converting fake parameters fails
    ("Couldn't swap"), even to where they are."""

    @functools.wraps(module_to)
    def run(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        tensors = [*self.parameters(), *self.buffers()]
        if all(
            (device is None or t.device == device) and (dtype is None or t.dtype == dtype)
            for t in tensors
        ):
            return self
        return module_to(self, *args, **kwargs)

    return run


def _optimizer_modules() -> list[Any]:
    """The modules of ``torch.optim`` that choose an optimizer's path by
    ``_default_to_fused_or_foreach`` (each imported the function by name)."""
    import sys

    import torch.optim  # noqa: F401  (imports the optimizers' modules)

    return [
        module
        for name, module in sorted(sys.modules.items())
        if name.startswith("torch.optim.") and hasattr(module, "_default_to_fused_or_foreach")
    ]


def _gpu_default(
    params: list[torch.Tensor | None], differentiable: bool, use_fused: bool = False
) -> tuple[bool, bool]:
    """``(fused, foreach)`` as PyTorch chooses them for tensors on a GPU: fused when asked
    for and every tensor is floating point, else foreach; neither when differentiable or
    TorchScript-compiled."""
    if torch._jit_internal.is_scripting() or differentiable:
        return False, False
    fused = use_fused and all(p is None or torch.is_floating_point(p) for p in params)
    return fused, not fused


def _gpu_dropout(dropout: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``F.dropout`` as it runs on a GPU: one ``native_dropout`` kernel in training at
    probabilities strictly between 0 and 1 (``at::dropout``'s ``is_fused_kernel_acceptable``
    holds only for CUDA tensors, so the fake CPU tensors would take the ``bernoulli_``,
    ``div_``, ``mul`` path); anything else as ``dropout`` does it."""

    @functools.wraps(dropout)
    def run(
        input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
    ) -> torch.Tensor:
        if not training or not 0 < p < 1 or input.numel() == 0:
            return dropout(input, p, training, inplace)
        out = fused_dropout(input, p)
        return input.copy_(out) if inplace else out

    return run


@contextmanager
def fake_rank(rank: int, world: int) -> Iterator[FakeTensorMode]:
    """Run as ``rank`` of ``world`` fake ranks: a fake process group, a fake tensor mode (the
    caller enters it), torch adapted as the module docstring says; all undone on exit."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        with _adapted_torch():
            yield FakeTensorMode(allow_non_fake_inputs=True)
    finally:
        dist.destroy_process_group()
