"""One traced rank of a user's training step: load the script, run its function as one rank
of a fake process group under fake tensors, and record its ops phase by phase
(:mod:`echo_view.tracing.script` describes the phases and the rules)."""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import itertools
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from echo_view.errors import ConfigError, EchoViewError, InputError
from echo_view.model.config import split_script
from echo_view.model.graph import OpTable
from echo_view.model.strings import StringTable
from echo_view.oslimits import die_with_parent
from echo_view.text import printable_lines
from echo_view.tracing.recorder import UnsupportedCollective
from echo_view.tracing.script_env import fake_rank
from echo_view.tracing.streams import StreamRecorder, cpu_streams

DEFAULT_FUNCTION = "train_step"
#: Seconds one rank's step may take to trace (Llama-3 70B, 80 layers: about a minute).
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ScriptSpec:
    """A script file and the function in it that runs one training step."""

    path: Path
    function: str = DEFAULT_FUNCTION

    @classmethod
    def parse(cls, text: str, base: Path | None = None) -> ScriptSpec:
        """``FILE.py[:FUNCTION]`` (:func:`~echo_view.model.config.split_script`), a relative
        ``FILE`` taken from ``base``."""
        path_text, function = split_script(text)
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


class _PhaseRecorder(StreamRecorder):  # type: ignore[no-untyped-call]
    """A :class:`StreamRecorder` that cuts the step into its phases (module docstring)."""

    def __init__(self, strings: StringTable) -> None:
        super().__init__(strings)
        self.phase = "setup"
        self.tables: dict[str, OpTable] = {}
        self.phase_groups: dict[str, list[tuple[int, tuple[int, ...]]]] = {}
        self.params = 0
        self.grad_dtype_bytes = 4

    def switch(self, phase: str) -> None:
        if self._cols is not None:
            self.wait_unwaited()
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
        if not optimizer.state:
            _skip_state_init(self, optimizer)
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


def _skip_state_init(rec: _PhaseRecorder, optimizer: Any) -> None:
    """Record nothing of ``optimizer``'s ``_init_group``: on the traced (first) step it
    creates the optimizer's state (Adam's moments and step counters: ``zeros_like`` and
    ``zeros`` kernels), which later steps, the ones a step time stands for, do not run."""
    init = getattr(optimizer, "_init_group", None)
    if init is None:
        return

    def unrecorded(*args: Any, **kwargs: Any) -> Any:
        with rec.paused():
            return init(*args, **kwargs)

    optimizer._init_group = unrecorded


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
    # Modules beside the script import as they do under `python script.py` or torchrun.
    folder = str(spec.path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        loader.loader.exec_module(module)
    except SyntaxError as exc:
        raise InputError(
            f"syntax error: {exc.msg}",
            path=spec.path,
            where=f"line {exc.lineno}" if exc.lineno is not None else None,
            hint="fix the script: `python -m py_compile FILE.py` shows the same error",
        ) from exc
    except SystemExit as exc:
        raise _exit_error(
            exc, spec, "the script", "when imported",
            'run a script\'s own entry point under `if __name__ == "__main__":`',
        ) from exc  # fmt: skip
    except _Timeout:
        raise
    except BaseException as exc:  # what the script's own top-level code raised, whatever its class
        missing = isinstance(exc, ModuleNotFoundError)
        raise InputError(
            f"importing the script raised {type(exc).__name__}: {_first_line(exc)}",
            path=spec.path,
            where=_script_line(exc, spec.path),
            hint="install it in echo-view's environment"
            if missing
            else "fix the script; --debug shows the traceback",
        ) from exc
    finally:
        sys.modules.pop(name, None)
    fn = getattr(module, spec.function, None)
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise InputError(
            f"{spec.function}() is asynchronous (async def): its step would never run",
            path=spec.path,
            hint="give a plain function (def) that runs one training step",
        )
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
    try:
        params = inspect.signature(fn).parameters
    except (ValueError, TypeError):  # a built-in such as max: no signature to call it by
        raise InputError(
            f"{spec.function} is not a Python function that runs a training step",
            path=spec.path,
            hint="give FILE.py:FUNCTION, a function defined in Python",
        ) from None
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


def timeout_error(spec: ScriptSpec, timeout_s: float, where: str | None) -> InputError:
    """The step did not return within the limit (``where``: the script's line it was at)."""
    return InputError(
        f"{spec.function}() did not return within {timeout_s:g} s",
        path=spec.path,
        where=where,
        hint="a step that loops or waits forever; raise the limit with --timeout",
    )


def _exit_error(exc: SystemExit, spec: ScriptSpec, who: str, when: str, hint: str) -> InputError:
    """``WHO called sys.exit(CODE) WHEN``, at the script's line."""
    return InputError(
        f"{who} called sys.exit({exc.code!r}){' ' + when if when else ''}",
        path=spec.path,
        where=_script_line(exc, spec.path),
        hint=hint,
    )


def _first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, at most 200 characters."""
    return (_text(exc).strip().splitlines() or [""])[0][:200]


def _script_error(exc: BaseException, spec: ScriptSpec, timeout_s: float) -> EchoViewError:
    where = _script_line(exc, spec.path)
    text = _first_line(exc)
    if isinstance(exc, _Timeout):
        return timeout_error(spec, timeout_s, where)
    if isinstance(exc, UnsupportedCollective):
        return InputError(
            f"unsupported collective {text}",
            path=spec.path,
            where=where,
            hint="echo-view traces all-reduce, all-gather, reduce-scatter, all-to-all, "
            "broadcast, reduce, send/recv",
        )
    if isinstance(exc, _ScriptShape):
        return InputError(
            text,
            path=spec.path,
            where=where,
            hint="the function runs one training micro-batch: the model's forward, the loss's "
            'backward, then optimizer.step(); see "Tracing a training script" in '
            "docs/workloads.md",
        )
    low = text.lower()
    if "cuda" in low or "nvidia" in low:
        hint = (
            "the step is traced on the CPU with fake tensors: choose the device with "
            "torch.cuda.is_available(), as samples/scripts/ do"
        )
    elif "couldn't swap" in low:
        hint = (
            "Module.to() cannot convert fake tensors: build the model in its dtype "
            "(torch.set_default_dtype) and on its device (with torch.device(...))"
        )
    elif "data-dependent" in low or "datadependent" in type(exc).__name__.lower():
        hint = (
            "fake tensors hold no values: the step may not read them on the host "
            "(.item(), .tolist(), printing a loss)"
        )
    else:
        hint = "fix the script; --debug shows the traceback"
    return InputError(
        f"{spec.function}() raised {type(exc).__name__}" + (f": {text}" if text else ""),
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
    strings: StringTable | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_start: Callable[[], None] | None = None,
) -> RankProgram:
    """Run the step as ``rank`` of ``world`` in this process and record it (string ids in
    ``strings``, a new table when ``None``); ``on_start`` is called when the time limit starts
    (before the script is imported)."""
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    rec = _PhaseRecorder(strings if strings is not None else StringTable())
    with fake_rank(rank, world) as fake:
        # The limit covers the script's import too: a loop at its top level ran until the
        # parent's wait (the limit plus the start allowance) ran out.
        started = time.monotonic()
        if on_start is not None:
            on_start()
        try:
            with _time_limit(timeout_s):
                fn = load_function(spec)
        except _Timeout as exc:
            raise InputError(
                f"importing the script did not finish within {timeout_s:g} s",
                path=spec.path,
                where=_script_line(exc, spec.path),
                hint="a top-level loop or wait; run the script's own work under "
                '`if __name__ == "__main__":`, or raise the limit with --timeout',
            ) from exc
        step_s = max(timeout_s - (time.monotonic() - started), 1e-3) if timeout_s > 0 else 0.0
        args = call_arguments(fn, kwargs, required, spec)
        handles = [
            register_module_forward_pre_hook(rec.on_forward),
            register_optimizer_step_pre_hook(rec.on_optimizer),
        ]
        try:
            with _time_limit(step_s), fake, rec, cpu_streams(rec):
                fn(**args)
            rec.finish()
        except EchoViewError:
            raise
        except SystemExit as exc:
            raise _exit_error(
                exc, spec, f"{spec.function}()", "",
                "the step function must return; leave exiting to the script's entry point",
            ) from exc  # fmt: skip
        except BaseException as exc:  # whatever the step raised (KeyboardInterrupt, its own)
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


#: Seconds a traced rank's process may take to start (import torch) before its limit starts.
_START_S = 120.0
#: Seconds past the limit before the parent kills the rank's process (room for a loaded machine
#: to record and send a step that ended just in time): its own alarm did not
#: stop the script (ignored or caught, or a long call in C that never returns to Python).
_GRACE_S = 30.0


class _PrintableStream:
    """A text stream that writes what it is given through :func:`printable_lines`: what a
    traced script prints reaches the user's terminal, never as escape sequences."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(printable_lines(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _child(conn: Any, args: tuple[Any, ...]) -> None:
    """Trace one rank in a child process and send back the program or the error. The process
    leads its own group, so that what the script forks ends with it, and dies with its parent
    (a ``kill -9`` of the command left it running). What the script prints goes to stderr,
    its file descriptor 1 included: the command's own output (``simulate --json``, ``plan
    --json``) is on stdout."""
    spec, offered, required, rank, world, timeout_s, parent = args
    os.setpgrp()
    die_with_parent(signal.SIGKILL, parent)
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = _PrintableStream(sys.stderr)
    sys.stderr = _PrintableStream(sys.stderr)
    try:
        strings = StringTable()
        prog = trace_rank(
            spec, offered, required, rank, world, strings, timeout_s,
            on_start=lambda: conn.send(("started",)),
        )  # fmt: skip
        conn.send(("ok", prog, list(strings.strings)))
    except EchoViewError as exc:
        error = (type(exc).__name__, exc.message, exc.path, exc.where, exc.hint)
        conn.send(("error", error, traceback.format_exc()))
    except BaseException as exc:  # reported to the parent, which raises it
        conn.send(("crash", f"{type(exc).__name__}: {_text(exc)}", traceback.format_exc()))
    finally:
        conn.close()


def _text(exc: BaseException) -> str:
    """``str(exc)``, or a word for it when its ``__str__`` raises."""
    try:
        return str(exc)
    except Exception:  # a script's exception class whose __str__ fails
        return "(its message cannot be shown)"


def _remap(prog: RankProgram, names: list[str], strings: StringTable) -> RankProgram:
    """``prog`` with its string ids moved from the child's table to ``strings``."""
    ids = np.array([strings.intern(s) for s in names] + [-1], dtype=np.int64)  # -1 stays -1
    tables = {
        phase: replace(t, name=ids[t.name], dtype=ids[t.dtype], shapes=ids[t.shapes])
        for phase, t in prog.tables.items()
    }
    return replace(prog, tables=tables)


@dataclass(eq=False)
class RankJob:
    """A rank being traced in its own process (:func:`start_rank`)."""

    spec: ScriptSpec
    rank: int
    timeout_s: float
    proc: Any
    recv: Any
    started: float


def start_rank(
    spec: ScriptSpec,
    offered: Mapping[str, Any],
    required: Mapping[str, Any],
    rank: int,
    world: int,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> RankJob:
    """Start :func:`trace_rank` in a fresh process: nothing one rank's run leaves in torch
    (process groups, device-mesh and DTensor caches, the script's module) reaches another, a
    step stuck outside Python can be killed, and the memory is returned."""
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    args = (spec, dict(offered), dict(required), rank, world, timeout_s, os.getpid())
    proc = ctx.Process(target=_child, args=(send, args), daemon=True)
    proc.start()
    send.close()
    return RankJob(spec, rank, timeout_s, proc, recv, time.monotonic())


def _kill_group(job: RankJob) -> None:
    """SIGKILL to the rank's process group (what the step forked or started), to be sent
    before the process is reaped: while it is not, no other process can hold its id."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(job.proc.pid, signal.SIGKILL)  # (ESRCH: it had not made its group yet)


def stop_rank(job: RankJob) -> None:
    """End the rank's process and whatever it started (:func:`_kill_group`)."""
    _kill_group(job)
    if job.proc.is_alive():
        job.proc.kill()
    job.proc.join()
    job.recv.close()


def _receive(job: RankJob, deadline: float) -> Any:
    """The rank's next message, or its timeout error at ``deadline`` (monotonic)."""
    if not job.recv.poll(max(deadline - time.monotonic(), 0.0)):
        raise timeout_error(job.spec, job.timeout_s, None)
    return job.recv.recv()


def finish_rank(job: RankJob, strings: StringTable) -> RankProgram:
    """Wait for the rank's program (string ids moved into ``strings``) or raise its error."""
    import echo_view.errors as errors

    spec = job.spec
    try:
        msg = _receive(job, job.started + _START_S)
        if msg[0] == "started":  # the limit runs from here, in the child and here
            msg = _receive(job, time.monotonic() + job.timeout_s + _GRACE_S)
        if msg[0] == "started":
            raise InputError(f"tracing rank {job.rank} started twice", path=spec.path)
    except EOFError:
        _kill_group(job)
        job.proc.join()
        code = job.proc.exitcode
        if code is not None and code < 0:  # killed by a signal: the kernel's OOM killer, mostly
            raise InputError(
                f"tracing rank {job.rank} was killed by signal {-code}",
                path=spec.path,
                hint="out of memory? trace fewer layers with --set, or on a larger machine",
            ) from None
        raise InputError(
            f"the script ended rank {job.rank}'s process (exit code {code}) before "
            f"{spec.function}() returned",
            path=spec.path,
            hint="the step function must return; it may not call os._exit()",
        ) from None
    finally:
        stop_rank(job)
    if msg[0] == "ok":
        return _remap(msg[1], msg[2], strings)
    cause = RuntimeError(f"in the traced rank's process:\n{msg[2]}")
    if msg[0] == "error":
        name, message, path, where, hint = msg[1]
        cls = getattr(errors, name, EchoViewError)
        raise cls(message, path=path, where=where, hint=hint) from cause
    raise RuntimeError(f"tracing rank {job.rank} failed: {msg[1]}") from cause
