"""Trace a user's own PyTorch training step into a :class:`TracedGraph`, ex-situ.

``FILE.py[:FUNCTION]`` (default ``train_step``) builds its model and runs one training step —
forward, backward, optimizer step — with ordinary ``torch.distributed`` code (DDP, FSDP2's
``fully_shard``, DTensor tensor parallelism, explicit collectives). It is run once per traced
rank as that rank of a fake process group, under a fake tensor mode (:mod:`script_env`): no
GPU, no communication, no weights. The :class:`Recorder` sees every aten op and every
collective that reaches the dispatcher; ops before the first module forward (building and
sharding the model, making the batch) are set up, not recorded.

Phases: ``forward`` runs from the first module forward to the first op autograd runs;
``backward`` from there (everything autograd runs, and what the script does before the
optimizer: gradient clipping, FSDP2's last reductions); ``optimizer`` from the first
``torch.optim`` step on. A second forward outside backward (gradient accumulation inside the
function) is refused: the function runs one micro-batch; the config's batch repeats it.

Roles: rank 0 and the last rank are traced; identical programs make one role for every rank
(ranks of a data-, tensor- or context-parallel layout differ only in their index). Scripts
that pipeline are not supported. Collectives carry their group's parallel axis, found by
matching the group's ranks with the layout's groups of the traced rank; every collective the
step needs is in the graph, so the composer adds none (``meta["explicit_comm"]``).
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from echo_view.errors import ConfigError, EchoViewError, InputError
from echo_view.model.config import ParallelConfig
from echo_view.model.graph import AXES, OpTable, Role, TracedGraph
from echo_view.model.strings import StringTable
from echo_view.sim.layout import Layout
from echo_view.tracing.recorder import Recorder, UnsupportedCollective
from echo_view.tracing.script_env import fake_rank

DEFAULT_FUNCTION = "train_step"
#: Seconds one rank's step may take to trace (Llama-3 70B, 80 layers: about a minute).
DEFAULT_TIMEOUT_S = 600.0
#: Parallel axes a collective's group is matched against, in this order.
_AXES = ("tp", "dp", "cp", "pp")


@dataclass(frozen=True)
class ScriptSpec:
    """A script file and the function in it that runs one training step."""

    path: Path
    function: str = DEFAULT_FUNCTION

    @classmethod
    def parse(cls, text: str, base: Path | None = None) -> ScriptSpec:
        """``FILE.py[:FUNCTION]``, a relative ``FILE`` taken from ``base``."""
        path_text, _, function = text.partition(":")
        path = Path(path_text)
        if base is not None and not path.is_absolute():
            path = base / path
        if path.suffix != ".py":
            raise ConfigError(
                f"not a Python script: {path_text!r}", hint="give FILE.py or FILE.py:FUNCTION"
            )
        return cls(path, function or DEFAULT_FUNCTION)


class _Timeout(Exception):
    pass


class _ScriptShape(Exception):
    """The function's step does not have the shape a traced graph needs."""


@dataclass(frozen=True, eq=False)
class RankProgram:
    """One traced rank: its phases and the group ranks of each phase's collectives."""

    rank: int
    tables: dict[str, OpTable]
    groups: dict[str, list[tuple[int, tuple[int, ...]]]]
    params: int
    grad_dtype_bytes: int

    def same_as(self, other: RankProgram) -> bool:
        """Same ops, sizes and group shapes (ranks differ; sizes of groups do not)."""
        for phase, t in self.tables.items():
            o = other.tables[phase]
            if len(t) != len(o) or any(
                not np.array_equal(getattr(t, c), getattr(o, c)) for c in t.__dataclass_fields__
            ):
                return False
            if [len(g) for _, g in self.groups[phase]] != [len(g) for _, g in other.groups[phase]]:
                return False
        return self.params == other.params


class _PhaseRecorder(Recorder):  # type: ignore[no-untyped-call]
    """A :class:`Recorder` that cuts the step into its phases (module docstring)."""

    def __init__(self, strings: StringTable) -> None:
        super().__init__(strings)
        self.phase = "setup"
        self.tables: dict[str, OpTable] = {}
        self.phase_groups: dict[str, list[tuple[int, tuple[int, ...]]]] = {}
        self.params = 0
        self.grad_dtype_bytes = 4

    def switch(self, phase: str) -> None:
        if self._cols is not None:
            self.tables[self.phase] = self.end()
            self.phase_groups[self.phase] = self.groups
        self.phase = phase
        self.begin()

    def finish(self) -> None:
        if self.phase != "optimizer":
            raise _ScriptShape(
                "the function returned before an optimizer step"
                if self.phase == "backward"
                else "the function ran no backward pass"
                if self.phase == "forward"
                else "the function ran no module forward"
            )
        self.switch("done")

    def on_forward(self, module: Any, args: Any) -> None:
        del module, args
        if self.phase == "setup":
            self.switch("forward")
        elif self.phase != "forward" and torch._C._current_autograd_node() is None:
            raise _ScriptShape(
                "a second forward pass after the backward pass: the function must run one "
                "micro-batch (the config's batch sets how many run per step)"
            )

    def on_optimizer(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        del args, kwargs
        if self.phase in ("setup", "forward"):
            raise _ScriptShape("an optimizer step before any backward pass")
        if self.phase == "backward":
            self.switch("optimizer")
        params = [p for g in optimizer.param_groups for p in g["params"]]
        self.params += sum(int(_local(p).numel()) for p in params)
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            self.grad_dtype_bytes = grads[0].element_size()

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        if self.phase == "forward" and torch._C._current_autograd_node() is not None:
            self.switch("backward")
        return super().__torch_dispatch__(func, types, args, kwargs)


def _local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (FSDP2 and tensor-parallel parameters), else ``t``."""
    to_local = getattr(t, "to_local", None)
    return to_local() if callable(to_local) else t


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`_Timeout` in the script after ``seconds`` (main thread only: elsewhere
    there is no limit)."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


_module_ids = itertools.count()


def load_function(spec: ScriptSpec) -> Callable[..., Any]:
    """Import the script (a fresh module each time) and return its step function."""
    if not spec.path.is_file():
        raise InputError("no such script", path=spec.path, hint="give FILE.py[:FUNCTION]")
    name = f"_echo_view_script_{next(_module_ids)}"
    loader = importlib.util.spec_from_file_location(name, spec.path)
    if loader is None or loader.loader is None:
        raise InputError("cannot be imported as a Python module", path=spec.path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[name] = module
    try:
        loader.loader.exec_module(module)
    except SyntaxError as exc:
        raise InputError(
            f"syntax error: {exc.msg}", path=spec.path, where=f"line {exc.lineno}"
        ) from exc
    finally:
        sys.modules.pop(name, None)
    fn = getattr(module, spec.function, None)
    if not callable(fn):
        raise InputError(
            f"the script defines no function {spec.function!r}",
            path=spec.path,
            hint="give FILE.py:FUNCTION, the function that runs one training step",
        )
    return fn  # type: ignore[no-any-return]


def call_arguments(
    fn: Callable[..., Any], offered: Mapping[str, Any], required: Mapping[str, Any], spec: Any
) -> dict[str, Any]:
    """The keyword arguments to call ``fn`` with: ``required`` (from ``--set``) must be
    parameters of ``fn``; ``offered`` (from a config) are passed where ``fn`` takes them."""
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    for key in required:
        if key not in params and not takes_any:
            raise ConfigError(
                f"{spec.function}() takes no argument {key!r}",
                path=spec.path,
                where=f"--set {key}",
                hint=f"its parameters: {', '.join(params) or 'none'}",
            )
    out = {k: v for k, v in offered.items() if takes_any or k in params}
    out.update(required)
    return out


def _script_line(exc: BaseException, path: Path) -> str | None:
    """``line N`` of the innermost frame of the traceback that is in the script."""
    target = path.resolve()
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == target:
            line = f"line {frame.lineno}"
    return line


def _script_error(exc: BaseException, spec: ScriptSpec, timeout_s: float) -> EchoViewError:
    where = _script_line(exc, spec.path)
    text = (str(exc).strip().splitlines() or [""])[0][:200]
    if isinstance(exc, _Timeout):
        return InputError(
            f"{spec.function}() did not return within {timeout_s:g} s",
            path=spec.path,
            where=where,
            hint="a step that loops or waits forever; raise the limit with --timeout",
        )
    if isinstance(exc, UnsupportedCollective):
        return InputError(
            f"unsupported collective {text}",
            path=spec.path,
            where=where,
            hint="echo-view traces all-reduce, all-gather, reduce-scatter, all-to-all, "
            "broadcast, reduce, send/recv",
        )
    if isinstance(exc, _ScriptShape):
        return InputError(text, path=spec.path, where=where)
    low = text.lower()
    if "cuda" in low or "nvidia" in low:
        hint = (
            "the step is traced on the CPU with fake tensors: choose the device with "
            "torch.cuda.is_available(), as samples/scripts/ do"
        )
    elif "data-dependent" in low or "datadependent" in type(exc).__name__.lower():
        hint = (
            "fake tensors hold no values: the step may not read them on the host "
            "(.item(), .tolist(), printing a loss)"
        )
    else:
        hint = "fix the script; --debug shows the traceback"
    return InputError(
        f"{spec.function}() raised {type(exc).__name__}: {text}",
        path=spec.path,
        where=where,
        hint=hint,
    )


def trace_rank(
    spec: ScriptSpec,
    kwargs: Mapping[str, Any],
    required: Mapping[str, Any],
    rank: int,
    world: int,
    strings: StringTable,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> RankProgram:
    """Run the step as ``rank`` of ``world`` and record it."""
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    rec = _PhaseRecorder(strings)
    with fake_rank(rank, world) as fake:
        fn = load_function(spec)
        args = call_arguments(fn, kwargs, required, spec)
        handles = [
            register_module_forward_pre_hook(rec.on_forward),
            register_optimizer_step_pre_hook(rec.on_optimizer),
        ]
        try:
            with _time_limit(timeout_s), fake, rec:
                fn(**args)
            rec.finish()
        except EchoViewError:
            raise
        except Exception as exc:
            raise _script_error(exc, spec, timeout_s) from exc
        finally:
            for h in handles:
                h.remove()
    return RankProgram(
        rank,
        {p: rec.tables[p] for p in ("forward", "backward", "optimizer")},
        {p: rec.phase_groups[p] for p in ("forward", "backward", "optimizer")},
        rec.params,
        rec.grad_dtype_bytes,
    )


def infer_layout(programs: list[RankProgram], world: int) -> Layout:
    """A layout for a script traced without a config: tensor parallel over the smallest
    group of consecutive ranks smaller than the world (none: tp = 1), data parallel across."""
    tp = world
    for prog in programs:
        for groups in prog.groups.values():
            for _, ranks in groups:
                consecutive = list(ranks) == list(range(ranks[0], ranks[0] + len(ranks)))
                if 1 < len(ranks) < world and consecutive:
                    tp = min(tp, len(ranks))
    tp = 1 if tp == world else tp
    return Layout(tp=tp, pp=1, dp=world // tp)


def axis_of(ranks: tuple[int, ...], rank: int, layout: Layout) -> str:
    """The parallel axis whose group of ``rank`` is exactly ``ranks``."""
    members = set(ranks)
    for axis in _AXES:
        if set(layout.group(axis, rank)) == members:
            return axis
    raise ValueError(ranks)


def _with_axes(prog: RankProgram, layout: Layout, spec: ScriptSpec) -> dict[str, OpTable]:
    out = {}
    for phase, table in prog.tables.items():
        axis = np.array(table.axis, copy=True)
        for row, ranks in prog.groups[phase]:
            try:
                axis[row] = AXES.index(axis_of(ranks, prog.rank, layout))
            except ValueError:
                shown = ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
                raise InputError(
                    f"rank {prog.rank}'s {phase} runs a collective over ranks [{shown}], no "
                    f"tp/dp/cp/pp group of the layout tp={layout.tp} dp={layout.dp} "
                    f"cp={layout.cp} pp={layout.pp}",
                    path=spec.path,
                    hint="set [parallel] in the config to the layout the script builds",
                ) from None
        out[phase] = replace(table, axis=axis)
    return out


@dataclass(frozen=True, eq=False)
class ScriptTrace:
    """The traced graph and what was traced, for the command to report."""

    graph: TracedGraph
    ranks: tuple[int, ...]
    reason: str


def trace_script(
    spec: ScriptSpec,
    world: int,
    *,
    offered: Mapping[str, Any] | None = None,
    required: Mapping[str, Any] | None = None,
    parallel: ParallelConfig | None = None,
    config: dict[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ScriptTrace:
    """Trace the rank roles of ``spec`` run on ``world`` ranks (module docstring): the
    function gets ``required`` (all must be its parameters) and those of ``offered`` it takes;
    collectives are matched with the groups of ``parallel`` (default: :func:`infer_layout`);
    ``config`` is stored in the graph."""
    strings = StringTable()
    ranks = (0,) if world == 1 else (0, world - 1)
    programs = [
        trace_rank(spec, offered or {}, required or {}, r, world, strings, timeout_s) for r in ranks
    ]
    if len(programs) == 1:
        reason = "one rank"
    elif programs[0].same_as(programs[1]):
        reason = f"ranks 0 and {world - 1} run identical programs: one role for all ranks"
    else:
        reason = (
            f"ranks 0 and {world - 1} differ; rank 0 stands for every rank (scripts are traced "
            "as one pipeline stage)"
        )
    lay = Layout.of(parallel) if parallel is not None else infer_layout(programs, world)
    first = programs[0]
    tables = _with_axes(first, lay, spec)
    for prog in programs[1:]:
        _with_axes(prog, lay, spec)  # every traced rank's groups must fit the layout
    role = Role(
        (0,),
        (tables["forward"],),
        (tables["backward"],),
        tables["optimizer"],
        first.params,
        first.grad_dtype_bytes,
    )
    meta = {
        "script": spec.path.name,
        "function": spec.function,
        "explicit_comm": True,
        "traced_ranks": list(ranks),
        "roles_reason": reason,
        "layout": {"tp": lay.tp, "dp": lay.dp, "cp": lay.cp, "pp": lay.pp},
        "torch": str(torch.__version__),
    }
    graph = TracedGraph(strings, (role,), config=config or {}, meta=meta)
    return ScriptTrace(graph, ranks, reason)
