"""Golden canonical dumps: what echo-view makes of the shipped samples, as digests.

For every sample job the data model (every column of every table of every rank, the strings,
lanes, groups, devices, clock alignment) and for a set of commands their output (``simulate
--json`` of replays and configs, ``export`` and ``simulate -o`` to JSON and protobuf) are
reduced to SHA-256 digests and small values in ``tests/golden/samples.json``.
``tests/test_golden.py`` recomputes them: a refactoring that changes any byte of what the
samples produce fails there, and says which item changed.

Update after an intended change, and commit the new file with the change that explains it::

    python -m tests.golden --update
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from echo_view.model import EventFacts

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "samples.json"
SAMPLES = Path("samples")

#: Sample jobs whose data model is dumped (paths relative to the repository root).
JOBS: dict[str, tuple[str, ...]] = {
    "dlrm_kineto": ("samples/dlrm_kineto",),
    "hta_nccl": ("samples/hta_nccl/nccl_data.json.gz",),
    "hta_sampled_128": ("samples/hta_sampled_128",),
    "nsys_h100_2gpu_1s": ("samples/nsys/h100_2gpu_1s.sqlite.gz",),
    "nsys_mfu_2gpu_after": ("samples/nsys/mfu_2gpu_after.sqlite.gz",),
}
#: Commands whose output is dumped: ``simulate --json`` (timing removed) and exports (bytes).
SIMULATE: dict[str, tuple[str, ...]] = {
    "replay_dlrm": ("samples/dlrm_kineto",),
    "replay_dlrm_comm_model": ("samples/dlrm_kineto", "--comm", "model"),
    "config_gpt175b_96xH800": ("samples/configs/echo-gpt175b-96xH800.toml",),
    "config_ci_tp2_pp2": ("samples/configs/megatron-ci-small/tp2-pp2.toml",),
    "config_ci_tp4_overlap_all_ranks": (
        "samples/configs/megatron-ci-small/tp4-pp1-overlap.toml",
        "--ranks",
        "all",
    ),
}
EXPORTS: dict[str, tuple[str, str, str]] = {
    "export_dlrm_json": ("export", "samples/dlrm_kineto", ".json"),
    "export_dlrm_pftrace": ("export", "samples/dlrm_kineto", ".pftrace"),
    "export_nsys_json": ("export", "samples/nsys/h100_2gpu_1s.sqlite.gz", ".json"),
    "predicted_ci_tp2_pp2_pftrace": (
        "simulate",
        "samples/configs/megatron-ci-small/tp2-pp2.toml",
        ".pftrace",
    ),
    "predicted_dlrm_json": ("simulate", "samples/dlrm_kineto", ".json"),
}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def canonical(value: Any) -> Any:
    """A JSON-able canonical form: arrays and long lists as digests, dataclasses by field."""
    if isinstance(value, np.ndarray):
        sha = _digest(value.tobytes())
        return {"dtype": value.dtype.str, "shape": list(value.shape), "sha": sha}
    if isinstance(value, EventFacts):  # computed on first use: dumped as the tables
        return {n: canonical(getattr(value, n)) for n in ("launches", "op_inputs", "syncs")}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "strings") and callable(getattr(value, "intern", None)):  # StringTable
        strings = list(value.strings)
        return {"count": len(strings), "sha": _digest("\0".join(strings).encode())}
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        items = [canonical(v) for v in value]
        if len(items) > 16:
            text = json.dumps(items, sort_keys=True)
            return {"count": len(items), "sha": _digest(text.encode())}
        return items
    if isinstance(value, bytes | bytearray | memoryview):
        return {"bytes": len(value), "sha": _digest(bytes(value))}
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return value.replace(str(ROOT) + os.sep, "")
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, np.generic):
        return canonical(value.item())
    return repr(value)


@contextlib.contextmanager
def _in_root() -> Iterator[None]:
    here = Path.cwd()
    os.chdir(ROOT)
    try:
        yield
    finally:
        os.chdir(here)


def _cli(args: list[str]) -> str:
    from echo_view.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    if code != 0:
        raise RuntimeError(f"echo-view {' '.join(args)} exited {code}: {err.getvalue()}")
    return out.getvalue()


def _job(paths: tuple[str, ...]) -> Any:
    from echo_view.loading import read_job

    return canonical(read_job([Path(p) for p in paths]))


def _simulate(args: tuple[str, ...]) -> Any:
    doc = json.loads(_cli(["simulate", *args, "--json"]))
    doc.pop("seconds", None)  # wall time of the run
    return canonical(doc)


def _export(command: str, source: str, suffix: str, scratch: Path) -> Any:
    target = scratch / f"out{suffix}"
    _cli([command, source, "-o", str(target)])
    data = target.read_bytes()
    target.unlink()
    return {"bytes": len(data), "sha": _digest(data)}


def items() -> dict[str, Callable[[Path], Any]]:
    """Every golden item by name: a function of a scratch directory giving its dump."""
    out: dict[str, Callable[[Path], Any]] = {}
    for name, paths in JOBS.items():
        out[f"model_{name}"] = lambda _s, p=paths: _job(p)
    for name, args in SIMULATE.items():
        out[f"simulate_{name}"] = lambda _s, a=args: _simulate(a)
    for name, (command, source, suffix) in EXPORTS.items():
        out[name] = lambda s, c=command, src=source, suf=suffix: _export(c, src, suf, s)
    return out


def compute(name: str, scratch: Path) -> Any:
    """The current dump of one item (run from the repository root)."""
    with _in_root():
        return items()[name](scratch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.golden", description=__doc__)
    parser.add_argument("--update", action="store_true", help=f"rewrite {GOLDEN}")
    args = parser.parse_args(argv)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        dumps = {name: compute(name, Path(tmp)) for name in items()}
    text = json.dumps(dumps, indent=1, sort_keys=True) + "\n"
    if args.update:
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
        print(f"wrote {GOLDEN.relative_to(ROOT)}: {len(dumps)} items", file=sys.stderr)
        return 0
    old = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    changed = sorted(k for k in dumps if old.get(k) != dumps[k])
    print("changed: " + (", ".join(changed) or "none"))
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
