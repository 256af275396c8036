"""``echo-view check PATH... [--json] [--select CODES] [--ignore CODES] [--job] [--fix -o OUT]``.

The command's description (:data:`DESCRIPTION`) says what it checks and its exit codes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import stat
import sys
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from echo_view.cli.console import console
from echo_view.cli.numargs import int_arg
from echo_view.cli.parallel import add_parallel_options, parallel_of
from echo_view.cli.pathargs import output_arg, path_arg
from echo_view.cli.progress import add_progress_option, stderr_progress
from echo_view.errors import InputError, LimitError, UsageError
from echo_view.formats import (
    Importer,
    Progress,
    Registry,
    atomic_output,
    check_output,
    no_progress,
    not_a_trace,
    reach_input,
    unreachable,
)
from echo_view.validate import (
    ContainerFacts,
    FileValidator,
    JsonErrorInfo,
    RankSummary,
    Report,
    Selection,
    check_job,
)
from echo_view.validate.events import FLOAT_HOOK, RawEvent, events_from_objects
from echo_view.validate.fix import repair
from echo_view.validate.imported import (
    check_rank,
    cross_rank_checks,
    join_rank_checks,
    summarise_rank,
)
from echo_view.validate.pftrace import XPLANE_SUFFIX, check_pftrace
from echo_view.validate.render import render_report
from importers.chrome_json import looks_like_trace, read_container, sniff_head
from importers.folder import folder_files, natural_key
from importers.nsys import captures_in

if TYPE_CHECKING:
    from echo_view.loading import Parallel

DESCRIPTION = (
    "Validate Chrome/Perfetto JSON traces (object or array form, gzip or not), Kineto job "
    "directories and native Perfetto protobuf traces. Each file streams through the rules chunk "
    "by chunk; the files of a directory (or all files with --job) are also checked as the ranks "
    "of one job. A file that is not JSON but that an importer reads (an Nsight Systems export) "
    "is imported and checked with the job-level rules. Exit code: 0 clean (warnings allowed), "
    "1 errors, 2 unusable input."
)
_JSON_SUFFIXES = (".json", ".json.gz")
#: What ``check`` reads, for the error on an input holding none of it.
CHECK_FORMATS = (
    "Chrome/Perfetto JSON traces (.json, .json.gz)",
    "Perfetto protobuf traces (.pftrace)",
    "Nsight Systems exports (.nsys-rep, .sqlite, .sqlite.gz)",
)
_ENCODER = msgspec.json.Encoder(decimal_format="number")
_PROTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".pb")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check",
        description=DESCRIPTION,
    )
    p.add_argument(
        "paths",
        nargs="+",
        type=path_arg,
        metavar="PATH",
        help="trace files (.json, .json.gz, .pftrace, Nsight Systems .sqlite[.gz] or .nsys-rep) "
        "or job directories",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="CODES",
        help="only these codes or prefixes (EV3, EV301,EV302); repeatable",
    )
    p.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="CODES",
        help="skip these codes or prefixes; repeatable",
    )
    p.add_argument(
        "--job", action="store_true", help="check the given files together as the ranks of one job"
    )
    p.add_argument(
        "--show",
        type=int_arg,
        default=3,
        metavar="N",
        help="locations shown per code in the text report (default 3)",
    )
    p.add_argument(
        "--fix", action="store_true", help="write a repaired copy of the (single) input to -o OUT"
    )
    p.add_argument("-o", "--output", type=output_arg, metavar="OUT", help="where --fix writes")
    add_parallel_options(p)
    add_progress_option(p)
    p.set_defaults(func=run)


@dataclass
class _Job:
    name: str
    files: list[Path] = field(default_factory=list)


def _trace_files(directory: Path) -> list[Path]:
    """The traces in ``directory``: JSON, protobuf and Nsight Systems captures (each capture
    once: not a report beside its SQLite export)."""
    # A trace by its name that cannot be read is refused, not skipped; an XLA profile's
    # XSpace (beside the trace JSON it is the profile of) is no trace.
    own = [
        p
        for p in folder_files(directory, (*_JSON_SUFFIXES, *_PROTO_SUFFIXES))
        if not p.name.endswith(XPLANE_SUFFIX)
        and (p.name.endswith(_PROTO_SUFFIXES) or looks_like_trace(sniff_head(p)))
    ]
    return sorted({*own, *captures_in(directory)}, key=natural_key)


def _fail(exc: OSError) -> None:
    """``os.walk``'s ``onerror``: a directory it cannot list stops the walk."""
    raise exc


def expand(paths: list[Path], as_job: bool) -> list[_Job]:
    """Files to check, grouped into jobs: a directory's trace files form one job (each
    sub-directory its own), loose files are single-file jobs unless ``as_job``."""
    jobs: list[_Job] = []
    loose = _Job("the given files")
    for path in paths:
        st = reach_input(path)
        if st is not None and stat.S_ISDIR(st.st_mode):
            # os.walk does not descend into symbolic links: a linked directory may lead out
            # of the one given (or back into it, forever). A sub-directory it cannot list is
            # an error, not skipped: its ranks would be missing from the job.
            try:
                tops = {path, *(Path(top) for top, _, _ in os.walk(path, onerror=_fail))}
                for d in sorted(tops):
                    files = _trace_files(d)
                    if files:
                        jobs.append(_Job(str(d), files))
            except OSError as exc:
                raise unreachable(exc, path) from None
        elif as_job:
            loose.files.append(path)
        else:
            jobs.append(_Job(str(path), [path]))
    if loose.files:
        jobs.insert(0, loose)
    if not jobs:
        raise not_a_trace(paths[0], CHECK_FORMATS)
    return jobs


def _classify(exc: InputError, facts: ContainerFacts) -> None:
    msg = exc.message
    where = exc.where or ""
    if msg.startswith(("truncated gzip", "damaged gzip")):
        facts.compression_error = f"{msg} ({where})" if where else msg
    elif msg.startswith("traceEvents is not a list"):
        facts.trace_events_type = msg.removeprefix("traceEvents is not a list (it is ").rstrip(")")
    elif msg.startswith(("not a trace", "empty file", "the file holds only")):
        facts.not_a_trace = msg
    else:
        line = col = None
        if where.startswith("line "):
            bits = where.split()
            line, col = int(bits[1]), int(bits[3])
        facts.json_error = JsonErrorInfo(msg, line, col)


def check_json_file(path: Path, report: Report) -> RankSummary:
    """Stream one JSON trace through the file rules; returns its rank summary."""
    v = FileValidator(str(path), report)
    facts = ContainerFacts(str(path), form="unknown")  # until the reader has seen the top level
    try:
        with read_container(path) as c:
            facts.form = c.form
            try:
                for chunk in c.chunks(RawEvent, float_hook=FLOAT_HOOK):
                    v.feed(chunk.events, chunk.first_index)
            except InputError as exc:
                if not (exc.where or "").startswith("traceEvents["):
                    raise
                # An element that is not an object: read again, element by element.
                return _check_loose(path, report)
            facts.top = c.top
            facts.truncated = c.truncated
            facts.events = c.event_count
    except InputError as exc:
        if exc.message.startswith("cannot open") or isinstance(exc, LimitError):
            raise
        _classify(exc, facts)
    return v.finish(facts)


def _check_loose(path: Path, report: Report) -> RankSummary:
    v = FileValidator(str(path), report)
    facts = ContainerFacts(str(path))
    with read_container(path) as c:
        facts.form = c.form
        for chunk in c.chunks(Any, float_hook=FLOAT_HOOK):
            v.feed(events_from_objects(chunk.events), chunk.first_index)
        facts.top, facts.truncated, facts.events = c.top, c.truncated, c.event_count
    return v.finish(facts)


def fix_file(src: Path, out: Path) -> list[str]:
    """Write a repaired copy of ``src`` to ``out`` (atomically); returns what changed."""
    check_output(out, [src])
    raws: list[msgspec.Raw] = []
    with read_container(src) as c:
        for chunk in c.chunks(msgspec.Raw):
            raws.extend(chunk.events)
        top, truncated = c.top, c.truncated
    result = repair(raws, top, truncated)
    with atomic_output(out) as tmp:
        opener = gzip.open if out.name.lower().endswith(".gz") else open
        with opener(tmp, "wb") as fh:
            fh.writelines(result.json_parts())
    return result.changes or ["nothing to repair; wrote an unchanged copy"]


def importer_for_other(path: Path, registry: Registry) -> Importer | None:
    """The importer for a file that is neither protobuf nor JSON text (an Nsight Systems
    export, say), or ``None`` (the JSON reader then reports what the file is not)."""
    if path.name.endswith(_PROTO_SUFFIXES):
        return None
    head = sniff_head(path).removeprefix(b"\xef\xbb\xbf").lstrip()
    if head[:1] in (b"{", b"["):  # JSON text: the JSON reader's diagnostics apply
        return None
    return next((imp for imp in registry.importers if imp.sniff(path)), None)


def check_file(path: Path, *, selection: Selection, keep: int) -> tuple[Report, RankSummary]:
    """One JSON trace checked on its own, in any process: a report of its findings only (for
    :meth:`Report.merge`) and its rank summary."""
    report = Report(selection, keep)
    return report, check_json_file(path, report)


def check_paths(
    paths: list[Path],
    report: Report,
    as_job: bool = False,
    registry: Registry | None = None,
    parallel: Parallel | None = None,
    progress: Progress = no_progress,
) -> None:
    """Check every file and every job, the files read where ``parallel`` says (in this
    process by default); findings go to ``report``. Each JSON file is checked where it is
    read and sends back its findings and rank summary; each imported rank is checked where
    it is read (:func:`~echo_view.loading.read_ranks`): the job's events are never held at
    once."""
    # The loader is imported here, not at the top: a single-file check does not need it.
    from echo_view.loading import SERIAL, build_registry, map_files, read_ranks

    if registry is None:
        registry = build_registry()
    where = parallel or SERIAL
    jobs = expand(paths, as_job)
    kinds = [[(path, _kind(path, registry)) for path in job.files] for job in jobs]
    json_files = [path for files in kinds for path, kind in files if kind == "json"]
    work = partial(check_file, selection=report.selection, keep=report.keep)
    total, done = sum(len(files) for files in kinds), 0
    with closing(map_files(json_files, work, where)) as checked:
        for job, files in zip(jobs, kinds, strict=True):
            summaries: list[RankSummary] = []
            exports: list[Path] = []
            imported: dict[int, tuple[Importer, list[Path]]] = {}
            for path, kind in files:
                if kind == "proto":
                    check_pftrace(path.read_bytes(), str(path), report)
                elif isinstance(kind, str):
                    found, summary = next(checked)[1]
                    report.merge(found)
                    if found.files and found.files[-1].export_ranks:
                        exports.append(path)  # its ranks form a job of their own
                    else:
                        summaries.append(summary)
                else:
                    imported.setdefault(id(kind), (kind, []))[1].append(path)
                    continue
                done += 1
                progress(f"{path.name}: checked", done / total)
            if len(summaries) > 1:
                check_job(summaries, report, job.name)
            for path in exports:
                # An echo-view export holds every rank in one file: the file rules have seen its
                # events; the cross-rank rules need it cut into ranks, as it is imported.
                rank = partial(summarise_rank, selection=report.selection, keep=report.keep)
                head, ranks = read_ranks([path], rank, registry, progress, where)
                cross_rank_checks(head, ranks, report, str(path))
            # Imported files of one format form one job (their ranks are checked together).
            for _imp, group in imported.values():
                rank = partial(check_rank, selection=report.selection, keep=report.keep)
                head, ranks = read_ranks(group, rank, registry, progress, where)
                join_rank_checks(head, ranks, report, job.name)


def _kind(path: Path, registry: Registry) -> Importer | str:
    """How ``path`` is checked: ``"proto"`` (Perfetto protobuf), ``"json"`` (streamed
    through the file rules) or the importer that reads it."""
    if path.name.endswith(_PROTO_SUFFIXES):
        return "proto"
    imp = importer_for_other(path, registry)
    return "json" if imp is None else imp


def _fix_input(paths: list[Path]) -> Path:
    """The one trace file ``--fix`` repairs: the single file given, or the only trace file
    of the single directory given."""
    if len(paths) != 1:
        raise UsageError(f"--fix repairs one trace file at a time, got {len(paths)} paths")
    if not paths[0].is_dir():
        return paths[0]
    files = [f for job in expand(paths, False) for f in job.files]
    if len(files) != 1:
        raise UsageError(
            f"--fix repairs one trace file at a time; this directory holds {len(files)}",
            path=paths[0],
            hint="give one of its files",
        )
    return files[0]


def run(args: argparse.Namespace, registry: Registry) -> int:
    try:
        selection = Selection.parse(args.select, args.ignore)
    except ValueError as exc:
        raise UsageError(
            str(exc), hint="codes look like EV301; see docs/validation-codes.md"
        ) from None
    if args.output is not None and not args.fix:
        raise UsageError("-o/--output is only used with --fix")
    report = Report(selection)
    changes: list[str] = []
    if args.show < 0:  # a slice from the end: "all but the last N"
        raise UsageError(f"--show must be 0 or more, got {args.show}")
    if args.fix:
        if args.output is None:
            raise UsageError("--fix needs -o OUT", hint="the input is never modified")
        if not args.output.name.lower().endswith(_JSON_SUFFIXES):  # the rule of every other writer
            raise UsageError(
                f"cannot write a repaired trace to {args.output.name!r}",
                hint="use .json or .json.gz",
            )
        src = _fix_input(args.paths)
        if src.name.endswith(_PROTO_SUFFIXES) or importer_for_other(src, registry):
            raise UsageError("--fix repairs JSON traces only", path=src)
        check_paths([src], report)
        changes = fix_file(src, args.output)
        after = Report(Selection.parse([c.split(":")[0] for c in changes if c.startswith("EV")]))
        if after.selection.select:
            check_paths([args.output], after)
            left = ", ".join(f"{t.code} ×{t.count:,}" for t in after)
            if left:
                changes.append(f"still present in {args.output}: {left}")
    else:
        with stderr_progress(args) as progress:
            check_paths(args.paths, report, args.job, registry, parallel_of(args), progress)
    if args.json:
        doc = report.to_json()
        if args.fix:
            doc["fix"] = {"output": str(args.output), "changes": changes}
        sys.stdout.buffer.write(_encode(doc) + b"\n")
    else:
        console(80, soft_wrap=True).print(render_report(report, args.show, changes))
    return report.exit_code()


def _encode(doc: Any) -> bytes:
    """``doc`` as JSON; a string holding a lone surrogate (a file name that is not UTF-8, as
    Python decodes it), which UTF-8 cannot encode, is written with ``\\udcXX`` escapes, as
    :func:`~echo_view.formats.json_text` writes it for the other commands."""
    try:
        return _ENCODER.encode(doc)
    except UnicodeEncodeError:
        return _ENCODER.encode(_escape_surrogates(doc))


def _escape_surrogates(value: Any) -> Any:
    """``value`` with each string UTF-8 cannot encode pre-encoded as ASCII JSON."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return msgspec.Raw(json.dumps(value).encode("ascii"))
        return value
    if isinstance(value, dict):
        return {k: _escape_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_escape_surrogates(v) for v in value]
    return value
