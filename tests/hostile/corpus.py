"""The hostile-input corpus: one entry per class of broken or malicious input, each built small
enough for CI from the real samples (a bomb keeps its ratio, not its size) and run through the
real command line by ``tests/hostile/test_corpus.py``.

A :class:`Case` writes its input(s) into a directory and names the command lines to run on them
(``{d}`` stands for that directory) and what each must end in:

- ``"error"``: exactly one line on stderr, exit 2, no traceback, no output file;
- ``"finding:CODE"``: ``check`` reports ``CODE`` (exit 1), no traceback;
- ``"note:CODE"``: ``check`` reports ``CODE``, an info finding, and no error (exit 0);
- ``"shown"``: exit 0 and the input's markup and escape sequences printed as text (stdout holds
  no ESC, CSI, BEL or backspace byte and shows the markup literally);
- ``"ok"``: exit 0 or 1 (check's findings), no traceback: the input is valid once read within
  its limits (a step number beyond int64 is no step marker; a symlink out of a directory is
  not followed).

Every case also bounds the run's time and peak memory against a tiny valid input.

New classes are added as entries of :data:`CASES` (a FIFO, a gzip bomb, ``-o`` onto an input
need only another ``build`` function).
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import SAMPLES
from tests.fuzz_data import BASE

#: Nesting depth of the "deep" JSON and TOML inputs (the originals had 10^5-10^6 levels; any
#: depth far past the stated limit takes the same path).
DEEP = 20_000
#: A name that is rich markup, an OSC-8 hyperlink, a screen clear and C0/C1 controls at once.
HOSTILE_NAME = "[/] [bold]B[link=http://x]L \x1b[2J\x1b]8;;http://evil\x07X\x1b]8;;\x07 \r\b\x9b"


@dataclass(frozen=True)
class Case:
    """One hostile input and the command lines to run on it."""

    name: str
    build: Callable[[Path], None]
    argvs: tuple[tuple[str, ...], ...]
    expect: str = "error"
    #: A path (relative to the case's directory) that must not exist after any run.
    output: str = "out.json"
    #: Text an error must name (``{d}``: the case's directory, where its inputs are).
    names: str = "{d}"
    #: Bytes stdout must not contain.
    absent: bytes = b"\x1b"


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(json.dumps(BASE))
    return doc


def _write_json(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc))


def valid_trace(d: Path) -> None:
    """The tiny valid input every case is measured against."""
    _write_json(d / "t.json", _doc())


def _events_text() -> str:
    return json.dumps(BASE["traceEvents"])[1:-1]


def _deep_args(d: Path) -> None:
    ev = '{"ph":"X","name":"a","ts":1,"dur":1,"pid":1,"tid":1,"args":'
    (d / "t.json").write_text('{"traceEvents":[' + ev + "[" * DEEP + "]" * DEEP + "}]}")


def _deep_tail(d: Path) -> None:
    text = '{"traceEvents":[' + _events_text() + '],"x":' + "[" * DEEP + "]" * DEEP + "}"
    (d / "t.json").write_text(text)


def _deep_unclosed(d: Path) -> None:
    (d / "t.json").write_text("[" + _events_text() + "," + "[" * DEEP)


def _deep_header(d: Path) -> None:
    (d / "t.json").write_text('{"x":' + "{" * DEEP + "}" * DEEP + ',"traceEvents":[]}')


def _big_step(d: Path) -> None:
    doc = _doc()
    for e in doc["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["name"] = "ProfilerStep#99999999999999999999"
    _write_json(d / "t.json", doc)


def _big_base_time(d: Path) -> None:
    _write_json(d / "t.json", {**_doc(), "baseTimeNanoseconds": 2**63})


def _big_nelems(d: Path) -> None:
    doc = _doc()
    for e in doc["traceEvents"]:
        if isinstance(e.get("args"), dict) and "Out msg nelems" in e["args"]:
            e["args"]["Out msg nelems"] = 2**63
    _write_json(d / "t.json", doc)


def _big_devices(d: Path) -> None:
    """Two real DLRM ranks (kernels that overlap NCCL's) with GPU numbers past 2^20, where
    `calibrate interference` once packed (trace, GPU) into one integer and lost them."""
    for i, src in enumerate(sorted((SAMPLES / "dlrm_kineto").glob("*.json.gz"))[:2]):
        with gzip.open(src, "rt", encoding="utf-8") as f:
            doc = json.load(f)
        for e in doc["traceEvents"]:
            args = e.get("args")
            if isinstance(args, dict) and isinstance(args.get("device"), int):
                args["device"] += 1 << 21
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                e["pid"] += 1 << 21  # Kineto: a GPU event's pid is its device
        _write_json(d / f"r{i}.json", doc)


def _big_rank(d: Path) -> None:
    doc = _doc()
    doc["distributedInfo"] = {**doc["distributedInfo"], "rank": 2**64, "world_size": -5}
    _write_json(d / "t.json", doc)


def _least_time(d: Path) -> None:
    """int64's least as a ``ts`` (its abs is itself: it was read as 0 ns)."""
    doc = _doc()
    doc["traceEvents"][-1]["ts"] = -(2**63)
    _write_json(d / "t.json", doc)


def _nsys_runs(d: Path) -> None:
    """Two of the shipped captures, made two days apart, in one directory."""
    for name in ("h100_2gpu_1s", "mfu_2gpu_after"):
        shutil.copy(SAMPLES / "nsys" / f"{name}.sqlite.gz", d / f"{name}.sqlite.gz")


def _odd_events(d: Path) -> None:
    """A real trace with a null, a list and a number among its events."""
    doc = _doc()
    for i, value in ((3, None), (10, [1, 2]), (20, 5)):
        doc["traceEvents"].insert(i, value)
    _write_json(d / "t.json", doc)


def _only_odd_event(d: Path) -> None:
    _write_json(d / "t.json", {"traceEvents": [None, [], 5]})


def _empty_events(d: Path) -> None:
    _write_json(d / "t.json", {"traceEvents": []})


def _markup_names(d: Path) -> None:
    doc = _doc()
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "cpu_op", "user_annotation"):
            e["name"] = HOSTILE_NAME + e["name"]
    _write_json(d / "t.json", doc)
    _write_json(d / "b.json", _doc())


def _overlapping_kernels(d: Path) -> None:
    """30,000 kernels on one stream, every one overlapping all the others (a stream's kernels
    overlap only under CUDA graphs, a few at a time): the replay's split of a stream into
    sequential sub-lanes scanned every sub-lane per kernel, O(n^2), about 13 s here."""
    n = 30_000
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 0,
                "tid": 7,
                "ts": i,
                "dur": 10 * n,
                "args": {"correlation": i, "device": 0, "stream": 7},
            }
            for i in range(n)
        ]
    }
    _write_json(d / "t.json", doc)


def _one_launch_many_kernels(d: Path) -> None:
    """3,000 kernels that name one launch's correlation id: 3,000 flows from one slice. The
    protobuf export wrote flows into its fixed-width rows, widening all of them per flow
    (O(n^2) time and memory: 2,000 took 7.6 s, 10,000 over a minute)."""
    n = 3_000
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1}
    events: list[dict[str, Any]] = [{**launch, "ts": 0, "dur": 5, "args": {"correlation": 1}}]
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "dur": 1}
    args = {"correlation": 1, "device": 0, "stream": 7}
    events += [{**kernel, "ts": 10 + i, "args": args} for i in range(n)]
    _write_json(d / "t.json", {"traceEvents": events})


def _long_group_name(d: Path) -> None:
    """3,000 collectives, each in a group of its own, one group's name 1 MB long. The protobuf
    export wrote group names into its fixed-width rows: a pass per distinct name (40,000:
    4.5 s), and every row of a chunk widened to the longest (a 61 GiB allocation, exit 1 with
    a traceback)."""
    kernel = {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "dur": 5}
    kernel["name"] = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long)"
    events = []
    for i in range(3_000):
        args = {"device": 0, "stream": 7, "correlation": i, "Collective name": "allreduce"}
        args |= {"In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float"}
        args |= {"Process Group Name": "G" * 1_000_000 if i == 7 else f"pg{i}"}
        events.append({**kernel, "ts": 10 * i, "args": {**args, "Process Group Ranks": "[0]"}})
    _write_json(d / "t.json", {"traceEvents": events})


def _crossing_slices(d: Path) -> None:
    """20,000 slices on one thread, each opening inside all earlier ones and outliving them:
    none nests with another, so each needs an overlap lane of its own. The export's lane
    assignment scanned every lane per slice (O(n^2): 10,000 took 4 s, 40,000 57 s); ``check
    --fix`` peeled one lane per pass and took the largest tid in use per new lane (20,000: 62 s)."""
    n = 20_000
    op = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "dur": 2 * n}
    _write_json(d / "t.json", {"traceEvents": [{**op, "ts": i} for i in range(n)]})


def _two_traces(d: Path) -> None:
    valid_trace(d)
    _write_json(d / "b.json", _doc())


def _nsys(d: Path) -> Path:
    out = d / "t.sqlite"
    with gzip.open(SAMPLES / "nsys" / "h100_2gpu_1s.sqlite.gz", "rb") as src, out.open("wb") as f:
        shutil.copyfileobj(src, f)
    return out


def _nsys_sql(sql: str) -> Callable[[Path], None]:
    """The sample export with ``sql`` run on it, the kernel table's NOT NULL constraints
    dropped first (as a damaged or hand-edited file has them)."""

    def build(d: Path) -> None:
        path = _nsys(d)
        con = sqlite3.connect(path)
        con.execute("PRAGMA writable_schema = ON")
        con.execute(
            "UPDATE sqlite_master SET sql = replace(sql, 'NOT NULL', '') "
            "WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'"
        )
        con.commit()
        con.close()
        con = sqlite3.connect(path)
        con.execute(sql)
        con.commit()
        con.close()

    return build


def _nsys_cycle(d: Path) -> None:
    """Every child pointer of the kernel table's root page points back at the root: walking
    the tree multiplies the page list by the root's fan-out at every level."""
    path = _nsys(d)
    con = sqlite3.connect(path)
    (root,) = con.execute(
        "SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'"
    ).fetchone()
    (page_size,) = con.execute("PRAGMA page_size").fetchone()
    con.close()
    data = bytearray(path.read_bytes())
    head = (root - 1) * page_size
    assert data[head] == 5, "the kernel table's root must be an interior page"
    count = int.from_bytes(data[head + 3 : head + 5], "big")
    me = root.to_bytes(4, "big")
    data[head + 8 : head + 12] = me
    for k in range(count):
        ptr = int.from_bytes(data[head + 12 + 2 * k : head + 14 + 2 * k], "big")
        data[head - head % page_size + ptr : head + ptr + 4] = me
    path.write_bytes(bytes(data))


def _zero_pftrace(d: Path) -> None:
    (d / "t.pftrace").write_bytes(bytes(1 << 20))


CONFIG = (SAMPLES / "configs" / "gpt175b-1024xH100.toml").read_text()


def _config(text: str | bytes) -> Callable[[Path], None]:
    def build(d: Path) -> None:
        path = d / "c.toml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)

    return build


def _config_set(section: str, line: str) -> str:
    """The sample config with ``line`` put first in ``[section]`` (replacing its key)."""
    key = line.split("=")[0].strip()
    out, inside = [], False
    for old in CONFIG.splitlines():
        if old.startswith("["):
            inside = old == f"[{section}]"
            out.append(old)
            if inside:
                out.append(line)
            continue
        if inside and old.split("=")[0].strip() == key:
            continue
        out.append(old)
    return "\n".join(out) + "\n"


GRAPH = SAMPLES / "configs" / "gpt175b-1024xH100.graph.json.gz"


def _graph_edit(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def build(d: Path) -> None:
        with gzip.open(GRAPH, "rt") as f:
            doc = json.load(f)
        edit(doc)
        (d / "g.json").write_text(json.dumps(doc))

    return build


def _graph_batch(doc: dict[str, Any]) -> None:
    doc["config"]["batch"]["global"] = 10**12


def _graph_pp(doc: dict[str, Any]) -> None:
    doc["config"]["parallel"]["pp"], doc["config"]["parallel"]["dp"] = 8, 16


def _graph_virtual(doc: dict[str, Any]) -> None:
    doc["config"]["parallel"]["virtual_stages"] = 2


def _graph_stages(doc: dict[str, Any]) -> None:
    doc["roles"][0]["stages"] = [10**6]


def _graph_deep(d: Path) -> None:
    text = '{"format": "echo-view.traced-graph", "roles": ' + "[" * DEEP + "]" * DEEP + "}"
    (d / "g.json").write_text(text)


def _nccl_log(d: Path) -> None:
    src = Path(__file__).parents[1] / "importers" / "nccl_tests_data" / "all_gather_2ranks.log"
    text = src.read_text().replace("        4096           512", f"{2**64} {2**63}")
    (d / "n.log").write_text(text)


def _symlink_out(d: Path) -> None:
    outside = d / "outside"
    outside.mkdir()
    _write_json(outside / "rank0.json", _doc())
    (d / "job").mkdir()
    _write_json(d / "job" / "rank1.json", _doc())
    (d / "job" / "link").symlink_to(outside, target_is_directory=True)


def _nccl_rows(d: Path) -> None:
    """An nccl-tests log whose table repeats the sample's 28 rows 400 times (11,200 rows)."""
    lines = (SAMPLES / "echo_nccl_tests" / "nccl_8.log").read_text().splitlines()
    head = [x for x in lines if x.startswith("#")]
    rows = [x for x in lines if x.strip() and not x.startswith("#")]
    (d / "nccl_8.log").write_text("\n".join(head + rows * 400) + "\n")


_T = "{d}/t.json"
_OUT = ("-o", "{d}/out.json")
#: A protobuf export whose output is valid (the case checks only that it ends cleanly).
_PFTRACE = (("export", _T, "-o", "{d}/out.pftrace"),)
_SIM = ("simulate", "{d}/c.toml", "--json")
_GRAPH_SIM = ("simulate", "{d}/g.json", "--json")

CASES: list[Case] = [
    Case("json-deep-args", _deep_args, (("info", _T), ("check", _T))),
    Case("json-deep-tail", _deep_tail, (("info", _T),)),
    Case("json-deep-unclosed", _deep_unclosed, (("check", _T),)),
    Case("json-deep-header", _deep_header, (("info", _T),)),
    Case("int-step-number", _big_step, (("info", _T), ("check", _T)), "ok"),
    Case("int-base-time", _big_base_time, (("info", _T),)),
    Case("int-base-time-check", _big_base_time, (("check", _T),), "ok"),
    Case("int-rank", _big_rank, (("export", _T, *_OUT),)),
    Case("int-rank-check", _big_rank, (("check", _T),), "finding:EV702"),
    Case("int-nelems", _big_nelems, (("check", _T),), "ok"),
    Case(
        "int-device-number",
        _big_devices,
        (("calibrate", "interference", "{d}/r0.json", "{d}/r1.json", "-o", "{d}/m.toml"),),
        "ok",
        output="none",
    ),
    Case("event-odd", _odd_events, (("check", _T),), "finding:EV201"),
    Case("event-only-odd", _only_odd_event, (("check", _T),), "finding:EV201"),
    Case("event-odd-import", _odd_events, (("info", _T),)),
    Case("events-empty", _empty_events, (("info", _T), ("export", _T, *_OUT))),
    Case("markup-names", _markup_names, (("info", _T), ("diff", _T, "{d}/b.json")), "shown"),
    Case("nsys-page-cycle", _nsys_cycle, (("info", "{d}/t.sqlite"),)),
    Case(
        "nsys-null-start",
        _nsys_sql("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = NULL WHERE rowid % 3 = 0"),
        (("info", "{d}/t.sqlite"),),
    ),
    Case(
        "nsys-negative-duration",
        _nsys_sql("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET [end] = start - 5 WHERE rowid % 3 = 0"),
        (("info", "{d}/t.sqlite"),),
    ),
    Case(
        "nsys-time-beyond-int64",
        _nsys_sql(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET [end] = {2**63 - 1} WHERE rowid = 5"),
        (("info", "{d}/t.sqlite"), ("export", "{d}/t.sqlite", *_OUT)),
    ),
    Case(
        "nsys-device-id",
        _nsys_sql("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = -3 WHERE rowid % 3 = 0"),
        (("info", "{d}/t.sqlite"), ("export", "{d}/t.sqlite", *_OUT)),
    ),
    Case("nsys-separate-runs", _nsys_runs, (("check", "{d}"),), "note:EV711"),
    Case("int-least-time", _least_time, (("info", _T), ("export", _T, *_OUT))),
    Case("int-least-time-check", _least_time, (("check", _T),), "finding:EV211"),
    Case("kernels-all-overlap", _overlapping_kernels, (("simulate", _T),), "ok"),
    Case("flows-from-one-slice", _one_launch_many_kernels, _PFTRACE, "ok", output="none"),
    Case("group-name-long", _long_group_name, _PFTRACE, "ok", output="none"),
    Case(
        "slices-all-cross",
        _crossing_slices,
        (("export", _T, *_OUT), ("check", _T, "--fix", "-o", "{d}/fixed.json")),
        "ok",
        output="none",
    ),
    Case("pftrace-zeros", _zero_pftrace, (("check", "{d}/t.pftrace"),)),
    Case("config-utf16", _config(CONFIG.encode("utf-16")), (_SIM,)),
    Case("config-stray-byte", _config(CONFIG.encode() + b"# \xff\n"), (_SIM,)),
    Case("config-deep-inline", _config("x = " + "{a = " * DEEP + "1" + "}" * DEEP), (_SIM,)),
    Case("config-deep-array", _config("x = " + "[" * DEEP + "]" * DEEP), (_SIM,)),
    Case("config-deep-dotted", _config("a" + ".a" * DEEP + " = 1\n" + CONFIG), (_SIM,)),
    Case("config-tiny-nic", _config(_config_set("cluster", "nic_gbytes_per_s = 1e-300")), (_SIM,)),
    Case("config-huge-batch", _config(_config_set("batch", "global = 1_000_000_000_000")), (_SIM,)),
    Case("config-int64-batch", _config(_config_set("batch", f"global = {2**64}")), (_SIM,)),
    Case("config-huge-layers", _config(_config_set("model", "layers = 1_600_000_000")), (_SIM,)),
    Case(
        "config-huge-cluster",
        _config(_config_set("parallel", "dp = 80_000_000").replace("nodes = 128", "nodes = 1")),
        (_SIM,),
    ),
    Case(
        "config-set-overflow",
        _config(CONFIG),
        ((*_SIM, "--set", "comm.scale=1e308"),),
        names="comm.scale",
    ),
    Case("graph-huge-batch", _graph_edit(_graph_batch), (_GRAPH_SIM,)),
    Case("graph-pp-mismatch", _graph_edit(_graph_pp), (_GRAPH_SIM,)),
    Case("graph-virtual-mismatch", _graph_edit(_graph_virtual), (_GRAPH_SIM,)),
    Case("graph-stage-bomb", _graph_edit(_graph_stages), (_GRAPH_SIM,)),
    Case("graph-deep", _graph_deep, (_GRAPH_SIM,)),
    Case(
        "nccl-log-int64",
        _nccl_log,
        (("calibrate", "comm", "{d}/n.log", "-o", "{d}/out.toml"),),
        output="out.toml",
    ),
    Case(
        "scheduler-malformed",
        valid_trace,
        (
            ("info", _T, "--scheduler", "not a url"),
            ("export", _T, *_OUT, "--scheduler", "ucx://h:1"),
        ),
        names="--scheduler ",
    ),
    # 1,000 local workers for two files: before the per-core bound, --workers 512 drove a
    # 2-core, 24 GB machine out of memory.
    Case("workers-absurd", _two_traces, (("info", "{d}", "--workers", "1000"),), names="--workers"),
    Case(
        "nccl-rows-bomb",
        _nccl_rows,
        (("calibrate", "comm", "{d}/nccl_8.log", "-o", "{d}/out.toml"),),
        output="out.toml",
    ),
    Case("dir-symlink-escape", _symlink_out, (("check", "{d}/job"),), "ok", absent=b"/link/"),
]
