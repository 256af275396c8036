"""The Dask cluster every fanning-out command runs on: a real local cluster of processes."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from echo_view import workers
from echo_view.errors import UsageError
from echo_view.workers import check_scheduler, check_workers, dask_client, default_workers
from tests.conftest import ROOT

pytest.importorskip("distributed", reason="the dask extra is not installed")


def _square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def _environ(name: str) -> str | None:
    return os.environ.get(name)


def _sigterm_handler() -> str:
    return repr(signal.getsignal(signal.SIGTERM))


def _forked() -> bool:
    """True in a worker that is a copy of the test process (which set the hook before the
    cluster started), False in a new interpreter."""
    return workers._FORK_HOOKED


def _callbacks(dask_worker: Any) -> dict[str, float]:
    return {name: pc.callback_time for name, pc in dask_worker.periodic_callbacks.items()}


@pytest.mark.slow
def test_local_cluster_runs_work_in_worker_processes_and_stops_them() -> None:
    import dask

    with dask_client(workers=2) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        results = client.gather(client.map(_square_and_pid, range(8)))
        # Dask's default makes glibc return freed memory at once (slower reads); the local
        # workers run without it, and Dask's other worker settings stay.
        assert dask.config.get("distributed.nanny.pre-spawn-environ")["MALLOC_TRIM_THRESHOLD_"]
        trim = client.run(_environ, "MALLOC_TRIM_THRESHOLD_")
        assert set(trim.values()) == {os.environ.get("MALLOC_TRIM_THRESHOLD_")}
        assert set(client.run(_environ, "OMP_NUM_THREADS").values()) == {"1"}
        # Their event loops wake rarely: no profiler, ticks every 500 ms, memory checked each
        # second (in ms, as Tornado counts).
        for callbacks in client.run(_callbacks).values():
            assert "profile" not in callbacks
            assert callbacks["tick"] == 500 and callbacks["memory_monitor"] == 1000
        assert dask.config.get("distributed.worker.profile.enabled")  # only the cluster's
        # Results come straight from the workers, not through the scheduler.
        assert client.direct_to_workers is True
    assert [r for r, _ in results] == [x * x for x in range(8)]
    # The work ran in worker processes, not in this one.
    assert os.getpid() not in {pid for _, pid in results}
    assert client.status == "closed"


def test_results_come_from_the_workers_unless_dask_is_told_otherwise() -> None:
    import dask

    # Unset (Dask's default, null, under which a client outside the cluster goes through the
    # scheduler): straight from the workers.
    assert workers._direct_to_workers() is True
    with dask.config.set({"distributed.client.direct-to-workers": False}):
        assert workers._direct_to_workers() is False
    with dask.config.set({"distributed.client.direct-to-workers": True}):
        assert workers._direct_to_workers() is True


def _command_handler(signum: int, frame: Any) -> None:
    raise AssertionError("the command's SIGTERM handler ran in a worker")


def forked_workers_report() -> dict[str, Any]:
    """What a 2-worker local cluster's workers are, started from this process with a
    command's SIGTERM handler installed (run by the test below in a new interpreter)."""
    previous = signal.signal(signal.SIGTERM, _command_handler)
    try:
        with dask_client(workers=2) as client:
            forked = sorted(set(client.run(_forked).values()))
            handlers = sorted(set(client.run(_sigterm_handler).values()))
            pids = [pid for _, pid in client.gather(client.map(_square_and_pid, range(4)))]
    finally:
        signal.signal(signal.SIGTERM, previous)
    return {
        "method": workers.start_method(),
        "forked": forked,
        "handlers": handlers,
        "in_this_process": os.getpid() in pids,
    }


@pytest.mark.slow
def test_local_workers_are_forked_on_linux_without_the_commands_signal_handlers() -> None:
    # A command turns SIGTERM into an exception for its own cleanup (echo_view.cli); a forked
    # worker must not inherit that: the nanny stops a stuck worker with SIGTERM. Run in a new
    # interpreter, as a command is: this one may have loaded torch, which makes it spawn.
    code = "import json, tests.test_workers as t; print(json.dumps(t.forked_workers_report()))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.splitlines()[-1])
    fork = sys.platform.startswith("linux")
    assert report["method"] == ("fork" if fork else "spawn")
    assert report["forked"] == [fork]
    assert report["handlers"] == [repr(signal.SIG_DFL)]
    assert not report["in_this_process"]


def test_a_process_that_loaded_torch_spawns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", sys)  # any module: only the name is looked up
    assert workers.start_method() == "spawn"


def test_worker_count_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_workers(1) == 1
    assert default_workers() >= 1
    # 4 per core: --workers 512 on 2 cores (24 GB) ran the machine out of memory.
    monkeypatch.setattr(workers, "default_workers", lambda: 2)
    assert workers.max_local_workers() == 8 and check_workers(8) == 8
    for bad in (0, -3, 9, 512, 10**6):
        with pytest.raises(
            UsageError, match=r"--workers must be between 1 and 8, got .*\(2 here\)"
        ):
            check_workers(bad)
    monkeypatch.setattr(workers, "default_workers", lambda: 512)
    assert workers.max_local_workers() == 1024  # and MAX_WORKERS on any machine


@pytest.mark.slow
def test_unreachable_scheduler_is_one_usage_error() -> None:
    # A refused connection is said as such (Dask's connect retried it for 10 s and said
    # "Timed out trying to connect").
    unreachable = r"cannot reach the Dask scheduler at tcp://127\.0\.0\.1:9: .*Connection refused"
    with pytest.raises(UsageError, match=unreachable), dask_client(scheduler="tcp://127.0.0.1:9"):
        pass


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("not a url", "expected [SCHEME://]HOST:PORT"),
        ("localhost", "expected [SCHEME://]HOST:PORT"),
        ("tcp://[::1", "expected [SCHEME://]HOST:PORT"),
        (":", "expected [SCHEME://]HOST:PORT"),  # was Python's "invalid literal for int()"
        ("tcp://:8786", "no host before the port"),
        # Dask reads ports with int(): these were ports 8786 and 1000.
        ("tcp://h:\uff18\uff17\uff18\uff16", "the port must be written in ASCII digits"),
        ("tcp://h:1_000", "the port must be written in ASCII digits"),
        # Without certificates the identity request failed with a message cut mid-word.
        ("tls://h:1", "a tls:// address needs TLS certificates"),
        ("ucx://h:1", "scheme 'ucx' is not one of tcp, tls, ws, wss"),
        ("inproc://x", "scheme 'inproc'"),
        ("tcp://h:0", "port 0 is not between 1 and 65535"),
        ("tcp://h:99999", "port 99999 is not"),
    ],
)
def test_malformed_scheduler_address_fails_at_once(address: str, why: str) -> None:
    # Before the check each of these either printed a traceback (ucx) or left a half-made
    # client whose destructor waited 20 s and printed one at exit. The message is the check's:
    # no client was made.
    with pytest.raises(UsageError, match=re.escape(why)) as info, dask_client(scheduler=address):
        pass
    assert str(info.value).startswith(f"--scheduler {address}: ")


def test_well_formed_scheduler_addresses_pass() -> None:
    for address in ("tcp://127.0.0.1:8786", "127.0.0.1:8786", "ws://h:1", "tcp://[::1]:8786"):
        assert check_scheduler(address) == address


@contextmanager
def _listener(greeting: bytes | None) -> Iterator[str]:
    """A TCP server on a free port that accepts, sends ``greeting`` (or nothing) and then holds
    the connection without a word, as an HTTP or SSH server does to a Dask client."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            held.append(conn)
            if greeting is not None:
                conn.sendall(greeting)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()
        for conn in held:
            conn.close()


def test_a_port_that_never_answers_is_refused_after_the_reply_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Client itself waited forever here (an HTTP server given as the scheduler).
    monkeypatch.setattr(workers, "SCHEDULER_REPLY_S", 0.5)
    never = pytest.raises(UsageError, match=r"no Dask scheduler answered within 0\.5 s")
    with _listener(None) as address, never:
        workers._check_is_scheduler(address)


def test_another_protocol_is_refused_not_read_as_dask_frames() -> None:
    # Client read an SSH banner as frame sizes and failed allocating 2.82 EiB.
    banner = b"SSH-2.0-OpenSSH_8.9p1 Ubuntu-3ubuntu0.6\r\n"
    other = pytest.raises(UsageError, match="does not speak Dask's protocol")
    with _listener(banner) as address, other:
        workers._check_is_scheduler(address)


@pytest.mark.slow
def test_a_worker_address_is_not_a_scheduler() -> None:
    with dask_client(workers=1) as client:
        worker = next(iter(client.scheduler_info()["workers"]))
        with pytest.raises(UsageError, match="a Dask Worker answers there, not a scheduler"):
            workers._check_is_scheduler(worker)
        workers._check_is_scheduler(client.scheduler.address)  # the scheduler passes


def _parent_death_signal() -> int:
    """PR_GET_PDEATHSIG of the calling process (Linux)."""
    import ctypes

    out = ctypes.c_int(0)
    ctypes.CDLL(None, use_errno=True).prctl(2, ctypes.byref(out), 0, 0, 0)
    return out.value


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_forked_workers_die_with_the_command() -> None:
    # The kernel signals each forked worker when the command dies, however it dies: Dask's
    # own check (a pipe per worker) is defeated by forked siblings holding each other's pipe
    # ends, and a command killed by the OOM killer left 499 workers holding the machine.
    script = (
        "import os, sys, time\n"
        "from echo_view.workers import dask_client\n"
        "from tests.test_workers import _parent_death_signal\n"
        "with dask_client(workers=2) as c:\n"
        "    info = c.run(lambda: (os.getpid(), _parent_death_signal()))\n"
        "    print(' '.join(f'{p} {s}' for p, s in info.values()), flush=True)\n"
        "    time.sleep(300)\n"
    )
    cmd = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert cmd.stdout is not None
        fields = [int(x) for x in cmd.stdout.readline().split()]
        pids, signals = fields[0::2], fields[1::2]
        assert len(pids) == 2 and set(signals) == {signal.SIGTERM}
    finally:
        cmd.kill()
        cmd.wait()
    alive = set(pids)
    for _ in range(600):  # a deadline for the test, not a speed it checks
        alive = {p for p in alive if _running(p)}
        if not alive:
            break
        time.sleep(0.05)
    for p in alive:
        os.kill(p, signal.SIGKILL)
    assert not alive, "workers outlived the command"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_low_open_files_limit_is_refused_before_the_cluster_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`ulimit -n 16`: Dask's servers looped on accept errors (188 MB of tracebacks in 20 s);
    24-40: a nanny failed to start with a traceback."""
    import resource

    from echo_view.workers import cluster_open_files, dask_client

    pytest.importorskip("distributed", reason="the dask extra is not installed")
    monkeypatch.setattr(resource, "getrlimit", lambda which: (16, 16))
    refused = pytest.raises(UsageError, match="needs at least 64 open files, and this process")
    with refused, dask_client(workers=2):
        pass
    assert cluster_open_files(2) == 64
    # A soft limit under the need but a hard one above: raised, not refused.
    asked: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda which: (16, 4096))
    monkeypatch.setattr(resource, "setrlimit", lambda which, limits: asked.append(limits))
    from echo_view.workers import _check_open_files

    _check_open_files(2)
    assert asked == [(64, 4096)]


def test_a_local_cluster_leaves_nothing_in_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Dask's own scratch space stayed behind: $TMPDIR/dask-scratch-space/{global,purge}.lock.
    from echo_view.workers import dask_client

    pytest.importorskip("distributed", reason="the dask extra is not installed")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with dask_client(workers=1) as client:
        assert client.submit(sum, [1, 2]).result() == 3
        assert any(tmp_path.iterdir())  # the cluster's folder, while it runs
    assert list(tmp_path.iterdir()) == []


class _NoWorkers:
    """A client whose cluster has lost every worker."""

    def nthreads(self) -> dict[str, int]:
        return {}


@pytest.mark.slow
def test_a_scheduler_without_workers_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # With no worker on the scheduler (none started, all dead, or none able to import
    # echo-view), every command waited forever without a word.
    import distributed

    monkeypatch.setattr(workers, "NO_WORKER_S", 1.0)
    monkeypatch.setattr(workers, "POLL_S", 0.2)
    kw: dict[str, Any] = {"processes": False, "dashboard_address": ":0", "protocol": "tcp"}
    with (
        distributed.LocalCluster(n_workers=0, **kw) as empty,
        pytest.raises(UsageError, match=r"no Dask worker at tcp://.* for 1 s"),
        dask_client(scheduler=empty.scheduler_address),
    ):
        pass
    assert workers._WATCHES == []


def test_a_wait_on_a_cluster_whose_workers_left_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    # Workers that leave once the work is sent: the wait on its result ends too.
    monkeypatch.setattr(workers, "NO_WORKER_S", 0.5)
    monkeypatch.setattr(workers, "POLL_S", 0.1)
    never: concurrent.futures.Future[int] = concurrent.futures.Future()
    monkeypatch.setattr(workers, "_WATCHES", [workers._Watch(_NoWorkers(), "tcp://h:1")])
    with pytest.raises(UsageError, match=r"no Dask worker at tcp://h:1 for 0.5 s"):
        workers.result_of(never)
    with pytest.raises(UsageError, match="no Dask worker"):
        workers.first_done({never})


def _die() -> None:
    os._exit(1)


@pytest.mark.slow
def test_a_task_that_kills_its_workers_is_one_usage_error() -> None:
    # distributed.KilledWorker (a worker killed by the OOM killer, again and again) ended the
    # command with a 26-line traceback, exit 1.
    import dask

    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        pytest.raises(UsageError, match="the Dask workers died running one task"),
        dask_client(workers=1) as client,
    ):
        workers.result_of(client.submit(_die, pure=False))
