"""Where work beyond one process runs: a ``dask.distributed`` cluster.

One place opens it for every command that fans out (reading many rank files, searching layouts):
a local cluster of worker processes by default, or an existing scheduler given by its address.
``dask`` is an optional extra (``pip install 'echo-view[dask]'``) and is imported only here, and
only when a cluster is asked for.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from echo_view.errors import UsageError
from echo_view.oslimits import die_with_parent, raise_open_files
from echo_view.text import clipped

MAX_WORKERS = 1024  # a local cluster larger than this is a typo, not a machine
#: Local workers per core at most: more processes than cores only share them, and each holds
#: its own interpreter and a rank file's working set (``--workers 512`` on 2 cores and 24 GB
#: drove the machine out of memory).
WORKERS_PER_CORE = 4


def default_workers() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def max_local_workers() -> int:
    """The most local worker processes this machine takes: :data:`WORKERS_PER_CORE` per core
    this process may run on, and at most :data:`MAX_WORKERS`."""
    return min(MAX_WORKERS, WORKERS_PER_CORE * default_workers())


def check_workers(n: int) -> int:
    """``n`` if it is a sensible local worker count, else a :class:`UsageError`."""
    limit = max_local_workers()
    if not 1 <= n <= limit:
        raise UsageError(
            f"--workers must be between 1 and {limit}, got {n}",
            hint=f"{WORKERS_PER_CORE} local worker processes per core at most "
            f"({default_workers()} here); a cluster of more machines: --scheduler ADDRESS",
        )
    return n


#: Schemes of a scheduler address a client in another process reaches by host and port (Dask's
#: ``inproc`` lives in one process; its ``ucx`` needs a separate package and crashes without it).
SCHEDULER_SCHEMES = ("tcp", "tls", "ws", "wss")


def check_scheduler(address: str) -> str:
    """``address`` if it reads as a Dask scheduler's ``[SCHEME://]HOST:PORT``, else a
    :class:`UsageError`. Checked before a ``Client`` is made: a client that fails on a malformed
    address waits 20 s at exit and prints a traceback from its destructor."""
    _dask()  # the extra's message if it is missing
    from distributed.comm.addressing import get_address_host_port, parse_address

    def bad(why: str) -> UsageError:
        return UsageError(
            f"--scheduler {address}: {why}",
            hint="give the address `dask scheduler` prints: tcp://HOST:PORT",
        )

    try:
        scheme, _ = parse_address(address, strict=False)
        if scheme not in SCHEDULER_SCHEMES:
            raise bad(f"scheme {scheme!r} is not one of {', '.join(SCHEDULER_SCHEMES)}")
        host, port = get_address_host_port(address)
    except ValueError:
        raise bad("expected [SCHEME://]HOST:PORT") from None
    # Dask reads the port with int(), which also takes "８７８６" and "1_000".
    if not _PORT.search(address):
        raise bad("the port must be written in ASCII digits")
    if not host:
        raise bad("no host before the port")
    if not 1 <= port <= 65535:
        raise bad(f"port {port} is not between 1 and 65535")
    if (
        scheme in ("tls", "wss")
        and _dask().security.Security().get_connection_args("client").get("ssl_context") is None
    ):
        raise UsageError(
            f"--scheduler {address}: a {scheme}:// address needs TLS certificates, and Dask's "
            "configuration names none",
            hint="set distributed.comm.tls.ca-file, .client.cert and .client.key in the Dask "
            "configuration (or DASK_DISTRIBUTED__COMM__TLS__... variables)",
        )
    return address


_PORT = re.compile(r":[0-9]+/?\Z", re.ASCII)


#: Seconds a scheduler has to accept the connection and answer an identity request.
SCHEDULER_REPLY_S = 10.0
#: Seconds a command waits while its cluster has no worker (none joined an external scheduler,
#: or all died) before it gives up: a task never runs there, and the wait was endless.
NO_WORKER_S = 60.0
#: Seconds between looks at the cluster while a command waits on its tasks.
POLL_S = 2.0


def _scheduler_identity(address: str, timeout: float) -> dict[str, Any]:
    """The reply of whatever listens at ``address`` to Dask's identity request, within
    ``timeout`` s in all. ``Client`` bounds only the connection attempts: on a port that accepts
    and never answers (an HTTP server, e.g. the dashboard's 8787 given for the scheduler's 8786)
    it waits forever, and on one that speaks first (an SSH banner) it reads the banner as frame
    sizes and fails allocating exabytes."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    distributed = _dask()
    tls = distributed.security.Security().get_connection_args("client")  # dask config's TLS

    # A refused connection is known at once; Dask's connect retries it until its timeout.
    host, port = distributed.comm.addressing.get_address_host_port(address)
    with socket.create_connection((host, port), timeout=timeout):
        pass

    async def ask() -> Any:
        comm = await distributed.comm.connect(address, timeout=timeout, **tls)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    # In a thread of its own: the caller may be running an event loop (the TUI's loader).
    with ThreadPoolExecutor(1) as pool:
        reply = pool.submit(asyncio.run, asyncio.wait_for(ask(), timeout)).result()
    return reply if isinstance(reply, dict) else {}


def _check_is_scheduler(address: str) -> None:
    try:
        reply = _scheduler_identity(address, SCHEDULER_REPLY_S)
    except TimeoutError:
        why = f"no Dask scheduler answered within {SCHEDULER_REPLY_S:g} s"
    except OSError as exc:  # refused, reset, closed: Dask's messages say which
        why = str(exc) or type(exc).__name__
    except Exception as exc:  # another protocol's bytes read as Dask frames fail in many ways
        detail = clipped(f"{type(exc).__name__}: {exc}", 120) if str(exc) else type(exc).__name__
        why = f"what answers there does not speak Dask's protocol ({detail})"
    else:
        kind = reply.get("type")
        if kind == "Scheduler":
            return
        why = f"a Dask {kind} answers there, not a scheduler" if kind else "no Dask scheduler there"
    raise UsageError(
        f"cannot reach the Dask scheduler at {address}: {why}",
        hint="start one with `dask scheduler` and give the address it prints, or drop "
        "--scheduler for a local cluster",
    )


def _dask() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise UsageError(
            "running on a Dask cluster needs the dask extra",
            hint="pip install 'echo-view[dask]'",
        ) from exc
    return distributed


#: What Dask's nannies set in a local worker's environment that echo-view's workers do without:
#: ``MALLOC_TRIM_THRESHOLD_`` (64 KiB in Dask's defaults) makes glibc hand freed memory back
#: at once, so each rank file's columns are faulted in afresh: 13% more CPU per file read
#: (16 rank files of 30 MB, the same process with and without it; docs/performance.md,
#: "Many-rank jobs"). A worker keeps at most one file's working set between tasks.
_UNSET_IN_WORKERS = ("MALLOC_TRIM_THRESHOLD_",)

#: Dask settings of a local cluster (its scheduler and nannies in this process, its workers).
#: A worker's event loop wakes every 10 ms for the statistical profiler, every 20 ms for its
#: tick, every 100 ms for its memory monitor and every 500 ms for its system monitor, and the
#: task thread hands over the GIL each time; the scheduler and the nannies tick and monitor in
#: this process, on the cores the workers read on. Nothing here reads the profiles or the
#: dashboard, so: no profiler, ticks and system samples rarely, memory checked each second
#: (spilling, pausing and the nanny's 95% limit still apply). A 1-worker cluster read 8 rank
#: files of 30 MB in 26% less time and 24% less worker CPU (medians of 9 interleaved pairs;
#: docs/performance.md, "Many-rank jobs").
LOCAL_CLUSTER_CONFIG: dict[str, object] = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "500ms",
    "distributed.admin.system-monitor.interval": "10s",
    "distributed.worker.memory.monitor-interval": "1s",
}


def start_method() -> str:
    """How a local cluster starts its worker processes (Dask's
    ``distributed.worker.multiprocessing-method``): ``fork`` on Linux, else Dask's ``spawn``.

    A spawned worker is a new interpreter that imports ``distributed``, numpy and echo-view
    before its first task: 1.0 s of CPU per worker, on the cores the workers then read on,
    and 1.3-1.6 s of wall time to start a 2-worker cluster (0.24 s more to close it). A forked
    worker is a copy of this process, which has imported them: 0.6-0.7 s to start, 0.04 s
    to close (``bench/ingest_bench.py --cluster-start``; docs/performance.md, "Many-rank
    jobs"). The child runs only the Dask worker,
    which builds its own event loop and threads; what a fork of a threaded process risks is a
    lock another thread held at that moment, and the other threads here are Dask's own (its
    event loop and process watchers: the setting Dask offers ``fork`` for), while CPython
    and ``logging`` re-create their locks in the child. A process that has loaded torch
    (``plan`` traces layouts) spawns: torch's OpenMP runtime is not safe across a fork. macOS
    and Windows spawn too (fork is unsafe there with the system frameworks, or absent)."""
    return "fork" if sys.platform.startswith("linux") and "torch" not in sys.modules else "spawn"


def _worker_signals() -> None:
    """In a forked worker: the command's SIGTERM handler (which raises in its main thread to
    clean up its outputs) must not run in a worker, which the nanny stops with SIGTERM when it
    does not exit on request; SIGINT is ignored, as in a spawned one
    (:func:`_children_ignore_sigint`). And the worker ends with the command, however the
    command ends (:func:`_die_with_parent`)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()


_PARENT_PID = 0  # the forking process, recorded just before each fork


def _before_fork() -> None:
    global _PARENT_PID
    _PARENT_PID = os.getpid()


def _die_with_parent() -> None:
    """Linux: SIGTERM to this forked worker when the command that forked it dies. Dask's own
    check (a pipe whose other end the parent holds) never fires for forked workers, as each
    also holds its siblings' ends: a command killed by the OOM killer or ``kill -9`` left its
    workers running, holding their memory, until killed by hand."""
    die_with_parent(signal.SIGTERM, _PARENT_PID)  # (no prctl: Dask's check is all there is)


_FORK_HOOKED = False


def _hook_forks() -> None:
    """Reset signal handlers in every forked child of this process (once per process): the
    only fork echo-view makes is a local Dask worker's (subprocesses exec)."""
    global _FORK_HOOKED
    if not _FORK_HOOKED:
        os.register_at_fork(before=_before_fork, after_in_child=_worker_signals)
        # Python 3.12+ warns that forking a threaded process may deadlock the child: see
        # start_method for why this one does not.
        warnings.filterwarnings(
            "ignore", message=r".*multi-threaded, use of fork\(\)", category=DeprecationWarning
        )
        _FORK_HOOKED = True


@contextmanager
def _local_cluster_config(scratch: str) -> Iterator[None]:
    """Dask's configuration for a local cluster: :data:`LOCAL_CLUSTER_CONFIG`, workers
    started by :func:`start_method`, their environment less :data:`_UNSET_IN_WORKERS` (a
    variable already in this process's environment stays: the workers inherit it), and the
    scratch folder ``scratch`` for the scheduler's and the workers' locks and spill (Dask's
    default, ``$TMPDIR/dask-scratch-space``, kept lock files after every run)."""
    import dask

    key = "distributed.nanny.pre-spawn-environ"
    environ = {k: v for k, v in dask.config.get(key, {}).items() if k not in _UNSET_IN_WORKERS}
    method = start_method()
    if method == "fork":
        _hook_forks()
    config = {
        key: environ,
        "distributed.worker.multiprocessing-method": method,
        "temporary-directory": scratch,
    }
    with dask.config.set({**config, **LOCAL_CLUSTER_CONFIG}):
        yield


def _direct_to_workers() -> bool:
    """Whether the client fetches results from the workers themselves (Dask's
    ``distributed.client.direct-to-workers``; echo-view's default: yes). Through the scheduler,
    every result crosses two connections and the scheduler's memory: 64 rank files' columns
    (1.1 GB) cost the command 0.5 s more CPU when the scheduler runs in its process, as a local
    cluster's does (docs/performance.md, "Many-rank jobs"). Where the client cannot reach a
    worker, Dask fetches that result through the scheduler after the connection times out;
    ``DASK_DISTRIBUTED__CLIENT__DIRECT_TO_WORKERS=False`` skips the attempt."""
    import dask

    setting = dask.config.get("distributed.client.direct-to-workers", None)
    return True if setting is None else bool(setting)


def cluster_open_files(n: int) -> int:
    """Open files a local cluster of ``n`` workers needs at least in this process: its
    scheduler's and nannies' sockets and pipes, and the modules its servers import. Measured:
    2 workers start at a limit of 44 and fail under it (``ulimit -n``)."""
    return 48 + 8 * n


def _check_open_files(n: int) -> None:
    """Raise the soft limit on open files to what a local cluster of ``n`` workers needs, or
    refuse: under it Dask's servers failed to accept connections in an endless loop of
    tracebacks (``ulimit -n 16``: 188 MB of stderr in 20 s) or a nanny failed to start with a
    traceback (24-40)."""
    need = cluster_open_files(n)
    soft = raise_open_files(need)
    if soft >= need:
        return
    raise UsageError(
        f"a local cluster of {n} worker processes needs at least {need} open files, and "
        f"this process may open {soft} (ulimit -n)",
        hint="raise the limit (ulimit -n 1024), or read in this process with --workers 1",
    )


@contextmanager
def _children_ignore_sigint() -> Iterator[None]:
    """SIGINT ignored while the block starts worker processes, which keep it ignored (an
    ignored signal stays ignored across exec, and Python installs no handler for it then).
    A terminal's Ctrl-C reaches its whole foreground process group: workers interrupted in a
    task printed KeyboardInterrupt tracebacks, or a nanny half-started failed at exit, while
    the command itself stops them as it leaves. Only the main thread may set handlers; a
    Ctrl-C in the few seconds the block takes is lost (press it again)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def dask_client(scheduler: str | None = None, workers: int | None = None) -> Iterator[Any]:
    """A ``distributed.Client``: on the scheduler at ``scheduler``, else on a local cluster of
    ``workers`` single-threaded worker processes (default: :func:`default_workers`).

    Leaving the block (normally, on an error or on Ctrl-C) closes the client and, for a local
    cluster, stops its worker processes, so nothing keeps running after the command.
    """
    distributed = _dask()
    with ExitStack() as stack:  # closes the client, then a local cluster's processes
        if scheduler is not None:
            check_scheduler(scheduler)
            _check_is_scheduler(scheduler)
            try:
                client = distributed.Client(
                    scheduler,
                    timeout=f"{SCHEDULER_REPLY_S:g}s",
                    set_as_default=False,
                    direct_to_workers=_direct_to_workers(),
                )
            except (OSError, TimeoutError, ValueError) as exc:
                raise UsageError(
                    f"cannot reach the Dask scheduler at {scheduler}: {exc}",
                    hint="start one with `dask scheduler`, or drop --scheduler for a local cluster",
                ) from None
        else:
            n = check_workers(workers if workers is not None else default_workers())
            _check_open_files(n)
            # Processes, one thread each: the work is pure Python (parsing, simulating) and
            # holds the GIL. The configuration is read as the servers are made, and sent to
            # the workers.
            # Removed after the cluster closes (the stack unwinds in reverse).
            scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="echo-view-dask-"))
            try:
                with _local_cluster_config(scratch), _children_ignore_sigint():
                    cluster = distributed.LocalCluster(
                        n_workers=n,
                        threads_per_worker=1,
                        processes=True,
                        # Any free port: a fixed one (8787) clashes with another cluster here.
                        dashboard_address=":0",
                        # Workers losing their scheduler on Ctrl-C log heartbeat tracebacks at
                        # ERROR; task errors reach the client as exceptions: only noise.
                        silence_logs=logging.CRITICAL,
                    )
            except (RuntimeError, OSError, MemoryError) as exc:  # out of processes or memory
                raise UsageError(
                    f"cannot start a local cluster of {n} worker processes ({exc})",
                    hint="read in this process with --workers 1, or free memory and processes",
                ) from None
            stack.callback(cluster.close)
            client = distributed.Client(
                cluster, set_as_default=False, direct_to_workers=_direct_to_workers()
            )
        stack.callback(client.close)
        if scheduler is not None:
            try:
                client.wait_for_workers(1, timeout=NO_WORKER_S)
            except TimeoutError:
                raise _no_worker(scheduler) from None
        watch = _Watch(client, scheduler)
        _WATCHES.append(watch)
        try:
            yield client
        except distributed.KilledWorker as exc:
            raise UsageError(
                f"the Dask workers died running one task, again and again ({clipped(str(exc))})",
                hint="a rank file too large for a worker's memory? read it with --workers 1, or "
                "give the workers more memory",
            ) from None
        except RuntimeError as exc:
            if "can't start new thread" not in str(exc):
                raise
            raise UsageError(
                "out of threads or memory for the Dask client (ulimit -u, ulimit -v)",
                hint="read in this process with --workers 1, or raise the limits",
            ) from None
        finally:
            _WATCHES.remove(watch)


class _Watch:
    """How long the cluster of one client has had no worker."""

    def __init__(self, client: Any, scheduler: str | None) -> None:
        self.client = client
        self.scheduler = scheduler
        self.since: float | None = None

    def check(self) -> None:
        """Raise :class:`UsageError` once the cluster has had no worker for
        :data:`NO_WORKER_S`."""
        if sum(self.client.nthreads().values()):
            self.since = None
            return
        now = time.monotonic()
        if self.since is None:
            self.since = now
        elif now - self.since > NO_WORKER_S:
            raise _no_worker(self.scheduler or "the local cluster")


#: The clients of the open :func:`dask_client` blocks, innermost last.
_WATCHES: list[_Watch] = []


def _no_worker(where: str) -> UsageError:
    return UsageError(
        f"no Dask worker at {where} for {NO_WORKER_S:g} s: the tasks cannot run",
        hint=f"start workers with `dask worker {where}` (they need echo-view installed), or drop "
        "--scheduler for a local cluster",
    )


def result_of(future: Any) -> Any:
    """``future.result()`` of a task of the innermost :func:`dask_client`, given up (one
    :class:`UsageError`) once the cluster has had no worker for :data:`NO_WORKER_S`."""
    while True:
        try:
            return future.result(timeout=POLL_S)
        except TimeoutError:
            if _WATCHES:
                _WATCHES[-1].check()


def first_done(futures: Any) -> tuple[set[Any], set[Any]]:
    """``concurrent.futures.wait(futures, return_when=FIRST_COMPLETED)`` for an executor of
    the innermost :func:`dask_client`, given up like :func:`result_of`."""
    while True:
        done, pending = concurrent.futures.wait(
            futures, timeout=POLL_S, return_when=concurrent.futures.FIRST_COMPLETED
        )
        if done or not pending:
            return done, pending
        if _WATCHES:
            _WATCHES[-1].check()
