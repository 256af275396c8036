"""Reading many-rank jobs: serial vs local worker processes vs a Dask cluster vs HTA.

Jobs of ``--ranks`` (default 64 and 512) rank files are generated once into ``bench/data/``
(git-ignored) from the real 8-rank DLRM job (``samples/dlrm_kineto``, one V100 host): rank ``r``
is DLRM rank ``r % 8``, its events repeated ``--copies`` times in time (timestamps and ids of
each copy shifted past the previous copy's, by :func:`import_bench.replicate`), written as plain
JSON with ``distributedInfo`` saying rank ``r`` of the job's world size.

Each measurement runs in a fresh subprocess and reports its wall time and its own peak RSS
(``VmHWM``, which starts afresh at ``exec``; worker processes are not counted):

- ``serial``: ``echo_view.loading.read_job(dir, parallel=SERIAL)``;
- ``local N``: ``read_job(dir, parallel=Parallel(workers=N))``, starting the local cluster of N
  processes included (as ``--workers N`` does);
- ``dask N``: the same on an already running ``dask.distributed`` local cluster of N worker
  processes (``--scheduler ADDRESS``), cluster start not included;
- ``read only N``: ``local N``'s reading of every rank file on the workers, each sending back
  only its event count (``echo_view.loading.map_files``): the speed-up of the reading itself,
  without shipping the columns to the command's process and joining them;
- for the methods that start a cluster in their subprocess (``local``, ``read only``, ``dask``),
  also the CPU time of its worker processes (``RUSAGE_CHILDREN`` once they have exited: their
  start and idle ticks included);
- ``hta``: HolisticTraceAnalysis 0.5.0 ``Trace(trace_dir=dir).parse_traces()`` (its own
  multiprocessing parse, one process per core), run by ``.venv-hta/bin/python``;
- ``info``, ``check``, ``interference``: ``echo-view COMMAND DIR --json --workers N``, the
  client's peak RSS, on the job and on one of its rank files, and the wall time on the job,
  for N = 1 (serial) and ``--workers`` (runs interleaved); ``--commands`` picks them,
  ``--client-only`` (or ``--info-only``) skips the rest;
- ``--paired N``: only ``serial`` and ``local N`` (``--workers``) on each job, alternated in N
  pairs, each pair's ratio and their median: on a machine whose speed drifts, a ratio taken
  within a pair moves less than a ratio of medians;
- ``--cluster-start``: only opening a local cluster of ``--workers`` processes, one task, and
  closing it, its workers spawned (Dask's default) against forked (echo-view's on Linux);
- ``ceiling``: plain ``json.loads`` of every rank file in one process against the files
  split over ``--workers`` processes started together (nothing of echo-view, no cluster), in
  the same rounds as the methods above: the speed-up the machine itself allows at that moment,
  against which the workers' speed-up is read (on a shared machine it is well below N).

    python bench/ingest_bench.py [--ranks 64 512] [--copies 4] [--workers 2] [--runs 3]
                                 [--hta-python .venv-hta/bin/python] [--client-only]
                                 [--commands info check interference] [--cluster-start]
                                 [--paired N]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import import_bench as ib

SOURCES = sorted((ib.ROOT / "samples" / "dlrm_kineto").glob("*.json.gz"))


def hwm_bytes() -> int:
    """This process's peak RSS (VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


# -- data ---------------------------------------------------------------------------------


def _templates(copies: int) -> list[bytes]:
    """The 8 DLRM ranks, each repeated ``copies`` times in time (cached in bench/data)."""
    out = []
    for i, src in enumerate(SOURCES):
        dst = ib.DATA / f"dlrm_rank{i}_x{copies}.json"
        if not dst.exists():
            size = ib.text_size(src)
            ib.replicate(src, dst, size * copies - size // 2)
        out.append(dst.read_bytes())
    return out


def generate(ranks: int, copies: int) -> Path:
    """The ``ranks``-rank job directory (written once)."""
    folder = ib.DATA / f"ingest_{ranks}ranks_x{copies}"
    if (folder / "done").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    templates = _templates(copies)
    key = b'"distributedInfo": '
    for r in range(ranks):
        text = templates[r % len(templates)]
        at = text.rindex(key) + len(key)
        end = text.index(b"}", at) + 1
        dist = json.loads(text[at:end])
        dist.update(rank=r, world_size=ranks)
        (folder / f"rank{r}.json").write_bytes(text[:at] + json.dumps(dist).encode() + text[end:])
    (folder / "done").write_text("")
    return folder


# -- workers (one per subprocess) -----------------------------------------------------------


def cpu_seconds() -> float:
    """This process's CPU time so far (user + system)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def workers_cpu_seconds() -> float:
    """CPU time of this process's exited children (user + system): a closed local cluster's
    worker processes, their start and idle ticks included."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def cluster_start(how: str, workers: int) -> None:
    """Open a local cluster of ``workers`` processes started by ``how`` (``spawn`` or
    ``fork``), run one task, close it: the seconds of each, this process's CPU and that of
    the workers (its children, once they have exited)."""
    import echo_view.loading  # noqa: F401  (loaded, as in a command that reads rank files)
    from echo_view import workers as ew

    ew.start_method = lambda: how  # the bench compares both; the product picks one
    t0 = time.perf_counter()
    with ew.dask_client(workers=workers) as client:
        t1 = time.perf_counter()
        client.submit(sum, [1, 2]).result()
        t2 = time.perf_counter()
    t3 = time.perf_counter()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        json.dumps(
            {
                "start": t1 - t0,
                "task": t2 - t1,
                "close": t3 - t2,
                "cpu": cpu_seconds(),
                "workers_cpu": kids.ru_utime + kids.ru_stime,
            }
        )
    )


def worker(method: str, path: str, workers: int) -> None:
    sys.path.insert(0, str(ib.ROOT))
    if method.startswith("start:"):
        cluster_start(method.partition(":")[2], workers)
        return
    if method.startswith("json"):
        # The machine's own ceiling: plain ``json.loads`` of every ``workers``-th rank file
        # from the ``k``-th (method ``json:k``), nothing of echo-view, no cluster.
        k = int(method.partition(":")[2] or 0)
        files = sorted(Path(path).glob("rank*.json"))[k::workers]
        t0 = time.perf_counter()
        for f in files:
            json.loads(f.read_bytes())
        print(
            json.dumps(
                {"seconds": time.perf_counter() - t0, "rss": hwm_bytes(), "ranks": len(files)}
            )
        )
        return
    if method == "hta":
        import logging

        logging.disable(logging.WARNING)
        from hta.common.trace import Trace

        t0 = time.perf_counter()
        trace = Trace(trace_dir=path)
        trace.parse_traces(use_multiprocessing=True, use_memory_profiling=False)
        seconds = time.perf_counter() - t0
        print(json.dumps({"seconds": seconds, "rss": hwm_bytes(), "ranks": len(trace.traces)}))
        return
    from echo_view.loading import SERIAL, Parallel, read_job

    if method in CLIENT_COMMANDS:
        import contextlib
        import io

        from echo_view.cli import main

        t0 = time.perf_counter()
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # check writes bytes
        with contextlib.redirect_stdout(out):
            code = main([method, path, "--json", "--workers", str(workers)])
        seconds = time.perf_counter() - t0
        out.flush()
        # Ranks in the output (check exits 1 when it finds errors; that is a result too).
        doc = json.loads(out.buffer.getvalue()) if code in (0, 1) else {}
        ranks = len(doc.get(CLIENT_COMMANDS[method], ()))
        print(
            json.dumps(
                {"seconds": seconds, "rss": hwm_bytes(), "ranks": ranks, "cpu": cpu_seconds()}
            )
        )
        return
    extra: dict[str, Any] = {}
    if method == "readonly":
        from functools import partial

        from echo_view.loading import RankFileReader, build_registry, job_importer, map_files

        importer = job_importer(build_registry(), [Path(path)])
        assert isinstance(importer, RankFileReader)
        t0 = time.perf_counter()
        files, many = importer.rank_files([Path(path)])
        work = partial(_events_read, importer=importer, many=many)
        extra["events"] = sum(n for _, n in map_files(files, work, Parallel(workers=workers)))
        seconds = time.perf_counter() - t0
        ranks = len(files)
    elif method == "dask":
        from echo_view.workers import dask_client

        with dask_client(workers=workers) as client:
            address = client.scheduler.address
            t0 = time.perf_counter()
            job = read_job([Path(path)], parallel=Parallel(scheduler=address))
            seconds = time.perf_counter() - t0
        ranks = len(job)  # (the job is held until the figures below are taken)
    else:
        parallel = SERIAL if method == "serial" else Parallel(workers=workers)
        t0 = time.perf_counter()
        job = read_job([Path(path)], parallel=parallel)
        seconds = time.perf_counter() - t0
        ranks = len(job)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "rss": hwm_bytes(),
                "ranks": ranks,
                **extra,
                "cpu": cpu_seconds(),
                "workers_cpu": workers_cpu_seconds(),
            }
        )
    )


def _events_read(path: Path, *, importer: Any, many: bool) -> int:
    """Read one rank file where the task runs and return only its event count."""
    return sum(len(t) for t in importer.read_rank_file(path, many).traces)


HTA_PYTHON: str | None = None  # --hta-python
#: The commands whose client RSS is measured, and the key of their JSON listing one item a rank.
CLIENT_COMMANDS = {"info": "ranks", "check": "files", "interference": "traces"}


def ceiling(path: Path, workers: int) -> tuple[float, float]:
    """Wall seconds of ``json.loads`` over every rank file in one process, and split over
    ``workers`` processes started together: the speed-up any ``workers``-process reader could
    reach on this machine at this moment."""
    one = time.perf_counter()
    run("json", path, 1)
    one = time.perf_counter() - one
    many = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", f"json:{k}", str(path), str(workers)],
            stdout=subprocess.DEVNULL,
        )
        for k in range(workers)
    ]
    if any(p.wait() for p in procs):
        raise RuntimeError("a json.loads process failed")
    return one, time.perf_counter() - many


def run(method: str, path: Path, workers: int) -> dict[str, float]:
    python = (HTA_PYTHON or ib.hta_python()) if method == "hta" else sys.executable
    if python is None:
        return {}
    out = subprocess.run(
        [python, __file__, "--worker", method, str(path), str(workers)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# -- main ---------------------------------------------------------------------------------


def bench(folder: Path, workers: int, runs: int, with_hta: bool) -> None:
    files = sorted(folder.glob("rank*.json"))
    size = sum(f.stat().st_size for f in files)
    print(f"\n{folder.name}: {len(files)} rank files, {size / 1e6:.0f} MB of JSON")
    methods = ["serial", "local", "readonly", "dask"] + (["hta"] if with_hta else [])
    rounds: list[dict[str, dict[str, float]]] = []
    ceilings: list[tuple[float, float]] = []
    for _ in range(runs):  # interleaved, so that every method meets the same load
        rounds.append({m: run(m, folder, workers) for m in methods})
        ceilings.append(ceiling(folder, workers))
    for m in methods:
        rs = [r[m] for r in rounds if r[m]]
        if not rs:
            print(f"  {m:7s} not available")
            continue
        t = statistics.median(r["seconds"] for r in rs)
        rss = statistics.median(r["rss"] for r in rs)
        label = {
            "local": f"local {workers}",
            "dask": f"dask {workers}",
            "readonly": f"read only {workers}",
        }.get(m, m)
        walls = ", ".join(f"{r['seconds']:.2f}" for r in rs)
        cpu = (
            f", client CPU {statistics.median(r['cpu'] for r in rs):.2f} s"
            if "cpu" in rs[0]
            else ""
        )
        if rs[0].get("workers_cpu"):
            cpu += f", workers' CPU {statistics.median(r['workers_cpu'] for r in rs):.2f} s"
        print(
            f"  {label:8s} median {t:6.2f} s ({size / 1e6 / t:5.1f} MB/s), client peak RSS "
            f"{rss / 1e6:5.0f} MB{cpu}; {int(rs[0]['ranks'])} ranks; runs {walls}"
        )
    for m in methods[1:]:
        if all(r[m] for r in rounds):
            x = statistics.median(r["serial"]["seconds"] / r[m]["seconds"] for r in rounds)
            print(f"  serial / {m}: {x:.2f}x")
    one = statistics.median(c[0] for c in ceilings)
    many = statistics.median(c[1] for c in ceilings)
    x = statistics.median(c[0] / c[1] for c in ceilings)
    print(
        f"  ceiling: json.loads of every file {one:.2f} s in 1 process, {many:.2f} s split over "
        f"{workers} processes: {x:.2f}x (runs "
        + ", ".join(f"{c[0] / c[1]:.2f}" for c in ceilings)
        + ")"
    )


def bench_paired(folder: Path, workers: int, pairs: int) -> None:
    """``serial`` then ``local`` (``workers`` processes, start included), ``pairs`` times: each
    pair's ratio, the median ratio, and the command's CPU and peak RSS with workers."""
    print(f"\n{folder.name}: serial / local {workers}, {pairs} alternated pairs")
    # Every file read once first, so that the first pair's serial run does not alone pay for
    # reading them from disk (a cold 512-rank job took 23 s serially against 12-13 s warm).
    for f in folder.glob("rank*.json"):
        f.read_bytes()
    ratios: list[float] = []
    for i in range(pairs):
        serial = run("serial", folder, workers)
        local = run("local", folder, workers)
        ratios.append(serial["seconds"] / local["seconds"])
        print(
            f"  pair {i + 1}: serial {serial['seconds']:.2f} s, local {workers} "
            f"{local['seconds']:.2f} s ({ratios[-1]:.2f}x); command CPU {local['cpu']:.2f} s, "
            f"workers' CPU {local['workers_cpu']:.2f} s, command peak RSS "
            f"{local['rss'] / 1e6:.0f} MB"
        )
    print(
        f"  serial / local {workers}: median {statistics.median(ratios):.2f}x "
        f"(range {min(ratios):.2f}-{max(ratios):.2f}x)"
    )


def bench_start(workers: int, runs: int) -> None:
    """Opening, using and closing a local cluster, spawned against forked (runs alternated)."""
    rows: dict[str, list[dict[str, float]]] = {"spawn": [], "fork": []}
    for _ in range(runs):
        for how, out in rows.items():
            out.append(run(f"start:{how}", ib.ROOT, workers))
    for how, out in rows.items():
        med = {k: statistics.median(r[k] for r in out) for k in out[0]}
        starts = ", ".join(f"{r['start']:.2f}" for r in out)
        print(
            f"  {how:5s} {workers} workers: start {med['start']:.2f} s (runs {starts}), first "
            f"task {med['task']:.2f} s, close {med['close']:.2f} s; CPU {med['cpu']:.2f} s "
            f"in this process (imports included), {med['workers_cpu']:.2f} s in the workers"
        )


def bench_client(command: str, folder: Path, workers: int, runs: int) -> None:
    """The command's client peak RSS on the job and on one rank file, with ``--workers 1`` and
    ``--workers N`` (runs interleaved), and the wall-time ratio of the two on the job."""
    one = sorted(folder.glob("rank*.json"))[0]
    counts = sorted({1, workers})
    job: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    for _ in range(runs):
        for n in counts:
            job[n].append(run(command, folder, n))
    for n in counts:
        single = [run(command, one, n) for _ in range(runs)]
        rj = statistics.median(r["rss"] for r in job[n])
        r1 = statistics.median(r["rss"] for r in single)
        walls = ", ".join(f"{r['seconds']:.2f}" for r in job[n])
        print(
            f"  {command} --workers {n}: client peak RSS {rj / 1e6:.0f} MB for "
            f"{int(job[n][0]['ranks'])} ranks, {r1 / 1e6:.0f} MB for one rank file "
            f"({rj / r1:.2f}x); median {statistics.median(r['seconds'] for r in job[n]):.2f} s "
            f"(runs {walls})"
        )
    if len(counts) == 2:
        x = statistics.median(
            a["seconds"] / b["seconds"] for a, b in zip(job[1], job[workers], strict=True)
        )
        print(f"  {command}: --workers 1 / --workers {workers}: {x:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 512])
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hta-ranks", type=int, default=64, help="run HTA on jobs up to this size")
    ap.add_argument("--hta-python", help="a Python with HTA (default: as import_bench.py)")
    ap.add_argument(
        "--client-only",
        "--info-only",
        action="store_true",
        help="measure only the commands' client RSS",
    )
    ap.add_argument(
        "--commands",
        nargs="+",
        choices=sorted(CLIENT_COMMANDS),
        default=list(CLIENT_COMMANDS),
        help="commands whose client RSS is measured",
    )
    ap.add_argument(
        "--cluster-start",
        action="store_true",
        help="only time opening and closing a local cluster, its workers spawned and forked",
    )
    ap.add_argument(
        "--paired",
        type=int,
        metavar="N",
        help="only serial against local --workers, alternated in N pairs (ratios per pair)",
    )
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        method, path, workers = args.worker
        worker(method, path, int(workers))
        return
    import os

    global HTA_PYTHON
    HTA_PYTHON = args.hta_python
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, medians of {args.runs}")
    if args.cluster_start:
        bench_start(args.workers, args.runs)
        return
    for ranks in args.ranks:
        folder = generate(ranks, args.copies)
        if args.paired:
            bench_paired(folder, args.workers, args.paired)
            continue
        if not args.client_only:
            bench(folder, args.workers, args.runs, ranks <= args.hta_ranks)
        for command in args.commands:
            bench_client(command, folder, args.workers, args.runs)


if __name__ == "__main__":
    main()
