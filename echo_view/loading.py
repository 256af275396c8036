"""Reading inputs, below every front end (the CLI, the Python API): trace paths into a
:class:`~echo_view.model.Job`, workload configs and traced graphs into a config and its graph.

Trace paths go to the importer that recognises the first one (:func:`job_importer`); a path is a
trace file, several files of one job, or a directory of rank files, as the importers define.
Graph lookup for a config (no torch needed when one is found): ``<config stem>.graph.json.gz``
beside the config, then the user cache (``$ECHO_VIEW_CACHE`` or ``~/.cache/echo-view/graphs``),
keyed by a hash of the config parts a graph depends on (:func:`tracing_key`). Only when none
matches is the config traced, which needs the ``trace`` extra (torch).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from echo_view.errors import ConfigError, EchoViewError, InputError, UsageError
from echo_view.formats import (
    Importer,
    Progress,
    Registry,
    check_input,
    describe_file,
    max_inflated_bytes,
    no_progress,
    reach_input,
    set_max_inflated_bytes,
)
from echo_view.model.config import WorkloadConfig, split_script
from echo_view.model.config_keys import config_to_mapping, tracing_key
from echo_view.model.config_parse import parse_workload_config
from echo_view.model.graph import TracedGraph
from echo_view.model.job import Job, JobHead
from echo_view.model.params import switch_value
from echo_view.model.toml_file import TomlDoc, read_toml, read_toml_doc
from echo_view.model.trace import Trace
from echo_view.spool import SpoolTo, spool, spool_folder, unspool
from echo_view.workers import dask_client, default_workers, result_of
from exporters.graph import write_graph
from importers.graph import is_graph_document, read_graph


def build_registry() -> Registry:
    """The built-in importers and exporters plus installed plug-ins."""
    from exporters.perfetto_json import PerfettoJsonExporter
    from exporters.perfetto_proto import PerfettoProtoExporter
    from importers.kineto import KinetoImporter
    from importers.nsys import NsysImporter

    reg = Registry()
    reg.add_importer(KinetoImporter())
    reg.add_importer(NsysImporter())
    reg.add_exporter(PerfettoJsonExporter())
    reg.add_exporter(PerfettoProtoExporter())
    reg.load_plugins()
    return reg


def job_importer(registry: Registry, paths: Sequence[Path]) -> Importer:
    """The importer of the first path, checked to read every other path too (one job)."""
    if not paths:
        raise UsageError("no input path given", hint="give a trace file or a directory of ranks")
    for path in paths:
        check_input(path)  # a FIFO or device is refused before a reader opens it
    importer = registry.importer_for(paths[0])
    for path in paths[1:]:
        other = registry.importer_for(path)
        if other.name != importer.name:
            raise UsageError(
                f"{path} is a {other.name} file but {paths[0]} is {importer.name}",
                hint="give the files of one job in one format",
            )
    return importer


@dataclass(frozen=True)
class Parallel:
    """Where rank files are read: ``workers`` local processes (``None``: one per core, and only
    when the job is big enough to repay starting them; 1: in this process), or the Dask
    cluster whose scheduler is at ``scheduler``."""

    workers: int | None = None
    scheduler: str | None = None


#: Reading in this process (``--workers 1``).
SERIAL = Parallel(workers=1)

#: Below this many bytes of JSON a local cluster started for the rank files would cost more
#: than it saves, unless ``--workers`` asks for one: a 2-process cluster forked on Linux takes
#: 0.6-0.7 s to start (spawned, 1.3-1.6 s) while one core reads Kineto JSON at 50-170 MB/s;
#: 64 rank files of 3.7 MB (234 MB) read 1.24-1.60x faster on 2 forked workers than in one
#: process, where spawned workers were slower (0.72-0.85x; docs/performance.md, "Many-rank
#: jobs").
FAN_OUT_BYTES = 1 << 28
#: A gzip file is counted as this many times its size (Kineto traces inflate 8-44x).
GZIP_WEIGHT = 8


@runtime_checkable
class RankFileReader(Protocol):
    """An importer whose job is one file per rank, each read on its own (in any process) and
    then joined, in file order, into the job."""

    def rank_files(self, paths: Sequence[Path]) -> tuple[list[Path], bool]: ...

    def read_rank_file(self, path: Path, many: bool) -> Any: ...

    def job_parts(self, paths: Sequence[Path], files: Sequence[Path], many: bool) -> Any: ...


@runtime_checkable
class RankDigester(RankFileReader, Protocol):
    """A :class:`RankFileReader` that can also turn a file's traces into per-rank results
    (``digest_part``) which its job parts join without the events (``finish_digests``)."""

    def digest_part(self, part: Any, digest: Callable[[Trace], Any]) -> Any: ...


def fans_out(files: Sequence[Path], parallel: Parallel) -> bool:
    """Whether ``files`` are read on a cluster: with ``--scheduler``, or ``--workers N`` (N>1),
    whenever there are two or more; by default only when they also hold at least
    :data:`FAN_OUT_BYTES` of JSON and this process may use more than one core."""
    return fan_out_sizes(files, parallel) is not None


def fan_out_sizes(files: Sequence[Path], parallel: Parallel) -> list[int] | None:
    """The JSON size of each of ``files`` when they are read on a cluster (:func:`fans_out`),
    for sharing them out; ``None`` when they are read here. Each file is sized once (an open
    and a ``stat``, which cost on a cluster's shared file system)."""
    if len(files) < 2 or parallel.workers == 1:
        return None
    explicit = parallel.scheduler is not None or parallel.workers is not None
    if not explicit and default_workers() == 1:
        return None
    sizes = list(map(_json_bytes, files))
    return sizes if explicit or sum(sizes) >= FAN_OUT_BYTES else None


def _json_bytes(path: Path) -> int:
    """About how much text ``path`` holds (gzip counted at :data:`GZIP_WEIGHT` x its size)."""
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    return path.stat().st_size * (GZIP_WEIGHT if gz else 1)


def read_job(
    paths: Sequence[Path],
    registry: Registry | None = None,
    progress: Progress = no_progress,
    parallel: Parallel = SERIAL,
) -> Job:
    """The job the trace files (or rank directory) ``paths`` hold, its rank files read where
    ``parallel`` says (:func:`fans_out`); the job is the same wherever they are read."""
    reg = registry if registry is not None else build_registry()
    importer = job_importer(reg, paths)
    if parallel == SERIAL or not isinstance(importer, RankFileReader):
        return importer.read(list(paths), progress)
    files, many = importer.rank_files(paths)
    sizes = fan_out_sizes(files, parallel)
    if sizes is None:
        return importer.read(list(paths), progress)
    parts = importer.job_parts(paths, files, many)
    for i, (path, part) in enumerate(_file_parts(importer, files, many, parallel, sizes=sizes)):
        parts.add(part)
        del part
        progress(f"{path.name}: read", (i + 1) / len(files))
    result: Job = parts.finish()
    return result


R = TypeVar("R")


def read_ranks(
    paths: Sequence[Path],
    digest: Callable[[Trace], R],
    registry: Registry | None = None,
    progress: Progress = no_progress,
    parallel: Parallel = SERIAL,
) -> tuple[JobHead, list[R]]:
    """The job ``paths`` hold, without its events, and ``digest`` of each of its traces, in
    rank order: for a command that needs only per-rank results. Each rank file is digested
    where it is read (in this process one file at a time, or on the workers as
    :func:`read_job` would read it) and its events dropped, so this process never holds the
    whole job; ``digest`` must be a module-level function for the workers to receive it."""
    reg = registry if registry is not None else build_registry()
    importer = job_importer(reg, paths)
    files, many = (
        importer.rank_files(paths) if isinstance(importer, RankFileReader) else (list(paths), False)
    )
    if len(files) == 1 or not isinstance(importer, RankFileReader):
        # Read whole (with the reader's own progress): one file holds no more than the job.
        job = importer.read(list(paths), progress)
        return job.head, [digest(t) for t in job.traces]
    if not isinstance(importer, RankDigester):
        # A reader of one file at a time that cannot digest a file on its own (Nsight Systems
        # captures, whose ranks are numbered across files): the job, its files read where
        # ``parallel`` says, then digested here.
        job = read_job(paths, reg, progress, parallel)
        return job.head, [digest(t) for t in job.traces]
    parts = importer.job_parts(paths, files, many)
    for i, (path, part) in enumerate(_file_parts(importer, files, many, parallel, digest)):
        parts.add(part)
        del part
        progress(f"{path.name}: read", (i + 1) / len(files))
    head, results = parts.finish_digests()
    return head, results


def _file_parts(
    importer: RankFileReader,
    files: Sequence[Path],
    many: bool,
    parallel: Parallel,
    digest: Callable[[Trace], Any] | None = None,
    sizes: Sequence[int] | None = None,
) -> Iterator[tuple[Path, Any]]:
    """Each file's part (its digest with ``digest``), in file order, read where ``parallel``
    says (:func:`map_files`, with ``sizes``)."""
    read = partial(_read_rank_file, importer=importer, many=many, digest=digest)
    yield from map_files(files, read, parallel, sizes)


W = TypeVar("W")


def map_files(
    files: Sequence[Path],
    work: Callable[[Path], W],
    parallel: Parallel,
    sizes: Sequence[int] | None = None,
) -> Generator[tuple[Path, W], None, None]:
    """``work`` of each of ``files``, in file order, done where ``parallel`` says
    (:func:`fans_out`): in this process one file at a time (its result yielded before the next
    file is read), or on the cluster's workers under this process's input limits. A file's
    :class:`EchoViewError` is raised here, in file order: the same first error and the same
    results wherever the files are read. ``work`` must be a module-level function (or a
    ``functools.partial`` of one) for the workers to receive it. ``sizes``, from
    :func:`fan_out_sizes` by a caller that has already decided to fan out, spares sizing the
    files again. Close the iterator (or run it out) to stop the cluster it started."""
    if sizes is None:
        sizes = fan_out_sizes(files, parallel)
    if sizes is None:
        for path in files:
            result = work(path)
            yield path, result
            del result  # before the next file is read
        return
    cap = max_inflated_bytes()
    name = getattr(work, "func", work).__name__.strip("_")  # the tasks' name on the cluster
    # The folder outlives the cluster (closed first, on leaving the inner block), so that no
    # worker still writes into it when it is removed.
    # A local cluster of no more workers than files: the others would only start and wait.
    local = min(len(files), parallel.workers or default_workers())
    with spool_folder() as spool_to, dask_client(parallel.scheduler, local) as client:
        cores = sum(client.nthreads().values())
        batches = file_batches(sizes, cores)
        groups = [[files[i] for i in batch] for batch in batches]
        futures = client.map(
            _on_worker,
            groups,
            work=work,
            inflation_cap=cap,
            spool_to=spool_to,
            key=name,
            pure=False,
        )
        for group, future in zip(groups, futures, strict=True):
            results = result_of(future)
            future.release()
            # Shorter than its group where a file failed: the error is its last result.
            for path, item in zip(group, results, strict=False):
                if isinstance(item, EchoViewError):
                    raise item
                try:
                    result = unspool(item)
                except (OSError, ValueError) as exc:  # its files removed under the read
                    raise InputError(
                        f"the columns a worker read from it were lost from shared memory ({exc})",
                        path=path,
                        hint="read the job again, or with --workers 1",
                    ) from exc
                del item
                yield path, result
                del result
            del results


#: A task on the cluster reads consecutive rank files until it holds this much JSON (or
#: 1/(4 x cores) of the job, if that is less, so that every worker gets several tasks): each
#: task costs the command's process its scheduling and a round trip to fetch the result, about
#: 10 ms, which on 512 files of 3.7 MB was a third of the command's CPU (docs/performance.md,
#: "Many-rank jobs"). 64 MiB rather than 32 since results come back through shared memory:
#: 512 files of 3.7 MB on 2 local workers in 6.81 against 7.23 s (medians of 8 alternated
#: pairs, 7 won), 64 files of 30 MB in 5.11 against 5.21 s ("Columns through shared memory").
TASK_BYTES = 1 << 26


def file_batches(sizes: Sequence[int], cores: int) -> list[range]:
    """Consecutive runs of the files of ``sizes`` (bytes of JSON each), one task each: a run
    ends once it holds ``min(TASK_BYTES, total / (4 * cores))`` bytes."""
    target = max(1, min(TASK_BYTES, sum(sizes) // (4 * max(1, cores))))
    out: list[range] = []
    start = held = 0
    for i, size in enumerate(sizes):
        held += size
        if held >= target:
            out.append(range(start, i + 1))
            start, held = i + 1, 0
    if start < len(sizes):
        out.append(range(start, len(sizes)))
    return out


def _on_worker(
    paths: Sequence[Path],
    *,
    work: Callable[[Path], W],
    inflation_cap: int | None,
    spool_to: SpoolTo | None = None,
) -> list[Any]:
    """``work`` of each of ``paths`` in a worker process under the client's input limits,
    up to the first bad file, whose error is returned last, for the client to raise in file
    order (a raised one would also be logged by the worker, with its traceback, on the
    command's stderr). Each result goes through the client's shared-memory folder (``spool_to``)
    where this worker can write there (:mod:`echo_view.spool`)."""
    set_max_inflated_bytes(inflation_cap)
    out: list[Any] = []
    for path in paths:
        try:
            out.append(spool(work(path), spool_to))
        except EchoViewError as exc:
            out.append(exc)
            break
    return out


def _read_rank_file(
    path: Path,
    *,
    importer: RankFileReader,
    many: bool,
    digest: Callable[[Trace], Any] | None = None,
) -> Any:
    """One rank file read (and digested, with ``digest``), in any process."""
    part = importer.read_rank_file(path, many)
    if digest is not None and isinstance(importer, RankDigester):
        return importer.digest_part(part, digest)
    return part


def setting_file(value: str | None) -> TomlDoc | None:
    """The TOML file a ``--set KEY=VALUE`` value names (``interference=model.toml``), read
    here, as the simulator reads no files; ``None`` for no value, a switch word (``on``,
    ``off``) or a path that does not exist (the simulator then says what is accepted)."""
    if value is None or switch_value(value) is not None or not value.strip():
        return None  # ("" is no path: Path("") would read the current directory)
    path = Path(value.strip())
    return read_toml_doc(path) if path.exists() else None


def is_workload_input(path: Path) -> bool:
    """True for a workload config (``.toml``) or a traced-graph JSON file."""
    if path.suffix.lower() == ".toml":
        return True
    st = reach_input(path, missing_ok=True)  # (is_file() raised on a name too long)
    return st is not None and stat.S_ISREG(st.st_mode) and is_graph_document(path)


#: What a workload-config input must be, for the errors about other inputs.
WANTS_CONFIG = (
    "a workload config (.toml); examples in samples/configs/, the format in docs/workloads.md"
)


def load_config(path: Path) -> WorkloadConfig:
    """Read and validate a workload config TOML file."""
    check_input(path, directory_ok=False, wants=WANTS_CONFIG)  # before any read: a FIFO blocks
    if path.suffix.lower() != ".toml":
        raise InputError(
            f"not a workload config: {describe_file(path)}" if path.exists() else "no such file",
            path=path,
            hint=f"expected {WANTS_CONFIG}",
        )
    return parse_workload_config(read_toml(path), str(path))


def script_file(cfg: WorkloadConfig) -> tuple[Path, str]:
    """The script file of a config's ``[model] script`` (relative to the config) and its
    function."""
    text = cfg.model.script or ""
    path_text, function = split_script(text)
    path = Path(path_text)
    if not path.is_absolute() and cfg.source:
        path = Path(cfg.source).parent / path
    return path, function or "train_step"


#: Largest script file read: a training script is kilobytes; a device or a huge file given by
#: mistake would otherwise be read whole to key its graph.
MAX_SCRIPT_BYTES = 16 << 20


def checked_script(cfg: WorkloadConfig) -> tuple[Path, str]:
    """:func:`script_file`, refused unless it is a regular file of at most
    :data:`MAX_SCRIPT_BYTES` that can be read (missing, a directory, a FIFO, a device, a name
    too long: one error naming ``model.script``)."""
    path, function = script_file(cfg)
    where = {"path": cfg.source or None, "where": "model.script"}
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"no such script: {path}", **where) from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise ConfigError(f"cannot reach the script {path} ({reason})", **where) from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(
            f"{path} is a directory, not a script",
            **where,
            hint="give the script's file, e.g. train.py[:FUNCTION]",
        )
    check_input(path, directory_ok=False)
    if st.st_size > MAX_SCRIPT_BYTES:
        raise ConfigError(
            f"the script {path} is {st.st_size:,} bytes, more than a training script "
            f"({MAX_SCRIPT_BYTES:,})",
            **where,
            hint="name the Python file that defines the step function",
        )
    return path, function


#: Revision of what the script tracer records (beside the config tracers'
#: ``TRACER_REVISION``), so that a script traced before is traced again. 1: optimizers take
#: their GPU default path (foreach) and ``.item()`` of a host scalar is no kernel. 2: DDP's
#: buckets are the ones it rebuilds after the first step (filled in gradient-ready order).
#: 3: a barrier is a one-element all-reduce. (Accepting a ``Module.to`` that moves nothing
#: changes no graph that traced before: such a script failed.)
SCRIPT_TRACER_REVISION = 3


def graph_key(cfg: WorkloadConfig) -> dict[str, Any]:
    """What a config's traced graph depends on: :func:`tracing_key`, and for a script the
    digest of its text (an edited script is traced again)."""
    key = tracing_key(cfg)
    if cfg.model.script is not None:
        key["script_tracer"] = SCRIPT_TRACER_REVISION
        path, _ = checked_script(cfg)
        try:
            key["script_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError as exc:
            raise ConfigError(
                f"cannot read the script {path} ({exc.strerror or exc})",
                path=cfg.source or None,
                where="model.script",
            ) from None
    return key


def key_hash(cfg: WorkloadConfig) -> str:
    """A short stable hash of the config parts a traced graph depends on."""
    text = json.dumps(graph_key(cfg), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_dir() -> Path:
    """Where traced graphs are cached: ``$ECHO_VIEW_CACHE``, else ``echo-view/graphs`` in
    ``$XDG_CACHE_HOME`` (when set to an absolute path, as the XDG base directory rules ask)
    or in ``~/.cache``."""
    env = os.environ.get("ECHO_VIEW_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "echo-view" / "graphs"


#: What the graph cache may hold: past it, the graphs used least recently go (a layout
#: search traces one graph per layout it tries, so the cache would otherwise only grow).
CACHE_MAX_BYTES = 256 << 20


#: The name of a cached graph (:func:`key_hash` and the suffix): the only files pruned, since
#: ``$ECHO_VIEW_CACHE`` may name a folder that holds the user's own traces too.
_CACHE_ENTRY = re.compile(r"[0-9a-f]{16}\.json\.gz")


def prune_cache(folder: Path, max_bytes: int = CACHE_MAX_BYTES) -> int:
    """Remove the least recently used graphs of ``folder`` (by modification time, which a
    cache hit refreshes) until it holds at most ``max_bytes``; the bytes removed. Only the
    cache's own entries count; those another process removes meanwhile are skipped."""
    entries = []
    for path in folder.glob("*.json.gz"):
        if not _CACHE_ENTRY.fullmatch(path.name):  # a file of the user's, not a cached graph
            continue
        try:
            st = path.stat()
        except OSError:
            continue
        entries.append((st.st_mtime_ns, st.st_size, path))
    held = sum(size for _, size, _ in entries)
    removed = 0
    for _, size, path in sorted(entries, key=lambda e: e[0]):
        if held - removed <= max_bytes:
            break
        try:
            path.unlink()
        except OSError:
            continue
        removed += size
    return removed


def _matches(graph: TracedGraph, cfg: WorkloadConfig) -> bool:
    return bool(graph.config.get("key") == json.loads(json.dumps(graph_key(cfg))))


def torch_missing(exc: ImportError, what: str = "tracing a config") -> ConfigError:
    """The error for ``exc``, met importing the tracer: torch not installed, or installed
    but failing to load (a memory limit, ``ulimit -v``, fails its shared libraries: saying
    "not installed" then sent the user to install what they had)."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "torch":
        return ConfigError(
            f"{what} needs torch, which is not installed",
            hint="pip install 'echo-view[trace]' (torch==2.13.0), or pass a traced graph",
        )
    return ConfigError(
        f"{what} needs torch, which could not be loaded ({exc})",
        hint="too little memory or address space for it (ulimit -v), or a damaged install "
        "(pip install --force-reinstall torch==2.13.0)",
    )


def trace_config(cfg: WorkloadConfig, timeout_s: float | None = None) -> TracedGraph:
    """Trace ``cfg`` on the meta device (its script, for ``[model] script``, within
    ``timeout_s`` per rank); a clear error when torch is missing."""
    if cfg.model.script is not None:
        graph: TracedGraph = trace_script_config(cfg, timeout_s).graph
        return graph
    try:
        from echo_view.tracing.roles import trace_workload
    except ImportError as exc:
        raise torch_missing(exc) from exc
    return trace_workload(cfg)


def trace_script_config(cfg: WorkloadConfig, timeout_s: float | None = None) -> Any:
    """Trace the script of a config's ``[model] script`` with the config's layout; the
    model's shape keys (with an MoE model's expert keys, ``ep`` and ``etp``), ``micro``, the
    parallel sizes and ``dtype`` are offered to its function. Returns a
    :class:`~echo_view.tracing.script.ScriptTrace`."""
    path, function = checked_script(cfg)
    try:
        from echo_view.tracing.script import DEFAULT_TIMEOUT_S, ScriptSpec, trace_script
    except ImportError as exc:
        raise torch_missing(exc) from exc
    m, p = cfg.model, cfg.parallel
    offered = {
        "layers": m.layers,
        "hidden": m.hidden,
        "heads": m.heads,
        "kv_heads": m.kv_heads,
        "ffn_hidden": m.ffn_hidden,
        "vocab": m.vocab,
        "seq_len": m.seq_len,
        "micro": cfg.batch.micro,
        "dtype": cfg.dtype,
        "tp": p.tp,
        "dp": p.dp,
        "cp": p.cp,
        "pp": p.pp,
        "recompute": p.recompute,
    }
    if m.moe is not None:
        offered |= {
            "experts": m.moe.experts,
            "top_k": m.moe.top_k,
            "moe_ffn_hidden": m.moe.moe_ffn_hidden,
            "shared_ffn_hidden": m.moe.shared_ffn_hidden,
            "first_dense_layers": m.moe.first_dense_layers,
            "ep": p.ep,
            "etp": p.expert_tp,
        }
    config = {"config": config_to_mapping(cfg), "key": graph_key(cfg)}
    return trace_script(
        ScriptSpec(path, function),
        p.world_size,
        offered=offered,
        parallel=p,
        config=config,
        timeout_s=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s,
    )


def beside_graph(config: Path) -> Path:
    """Where a config's traced graph is looked for first: ``<stem>.graph.json.gz`` beside it."""
    return config.with_name(config.stem + ".graph.json.gz")


def graph_for_config(
    cfg: WorkloadConfig, path: Path, timeout_s: float | None = None
) -> tuple[TracedGraph, str]:
    """The traced graph of ``cfg`` and where it came from (``beside``, ``cache``, ``traced``:
    a script within ``timeout_s`` per rank)."""
    beside = beside_graph(path)
    if beside.is_file():
        graph = read_graph(beside)
        if _matches(graph, cfg):
            return graph, "beside"
    cached = cache_dir() / f"{key_hash(cfg)}.json.gz"
    if cached.is_file():
        try:
            hit: TracedGraph | None = read_graph(cached)
        except InputError:
            hit = None  # a damaged cache entry is re-traced, not fatal
        if hit is not None and _matches(hit, cfg):
            with contextlib.suppress(OSError):
                os.utime(cached)  # recently used: kept longest by prune_cache
            return hit, "cache"
    graph = trace_config(cfg, timeout_s)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_graph(graph, cached)
        prune_cache(cached.parent)
    except (OSError, EchoViewError):
        pass  # a read-only home only costs re-tracing next time
    return graph, "traced"


def load_workload(
    path: Path, timeout_s: float | None = None
) -> tuple[WorkloadConfig, TracedGraph, str, float]:
    """Config and graph for a ``.toml`` or traced-graph input (a config's script traced within
    ``timeout_s`` per rank when it must be), and the seconds it took."""
    t0 = time.perf_counter()
    if path.suffix.lower() == ".toml":
        cfg = load_config(path)
        graph, origin = graph_for_config(cfg, path, timeout_s)
    else:
        graph = read_graph(path)
        cfg_map: Any = graph.config.get("config")
        if not cfg_map:
            script = graph.meta.get("script")
            hint = (
                "a script's graph holds no batch, layout or cluster: simulate a config with "
                f'[model] script = "{script}" and its [parallel], [batch] and [cluster] tables '
                '(docs/workloads.md, "Tracing a training script")'
                if script
                else "re-run echo-view trace CONFIG.toml"
            )
            raise InputError(
                "the traced graph carries no workload config", path=path, where="config", hint=hint
            )
        cfg = parse_workload_config(cfg_map, f"{path}:config")
        check_graph_shape(graph, cfg, path)
        origin = "graph"
    return cfg, graph, origin, time.perf_counter() - t0


def check_graph_shape(graph: TracedGraph, cfg: WorkloadConfig, path: Path) -> None:
    """The graph's roles fit its config: every pipeline stage has exactly one role, and each
    role one forward and one backward chunk per virtual stage."""
    pp, chunks = cfg.parallel.pp, cfg.parallel.virtual_stages
    seen: list[int] = []
    for i, role in enumerate(graph.roles):
        where = f"roles[{i}]"
        if len(role.forward) != chunks or len(role.backward) != chunks:
            raise InputError(
                f"{len(role.forward)} forward / {len(role.backward)} backward chunks, but the "
                f"config has virtual_stages = {chunks}",
                path=path,
                where=where,
                hint="the graph and its config disagree: re-run echo-view trace",
            )
        seen.extend(role.stages)
    if sorted(seen) != list(range(pp)):
        raise InputError(
            f"the roles' stages do not cover pipeline stages 0..{pp - 1} exactly once "
            f"(config pp = {pp})",
            path=path,
            where="roles",
            hint="the graph and its config disagree: re-run echo-view trace",
        )
