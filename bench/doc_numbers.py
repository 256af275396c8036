"""Every number the docs quote from a deterministic command, regenerated and compared with the
text, so that a stale doc fails a test (``tests/test_doc_numbers.py`` runs ``--check``).

    python bench/doc_numbers.py [--check] [FILE.md ...]   (default: README.md and docs/*.md)

What is checked:

- **Example outputs**: a fenced block whose first line is ``$ echo-view ARGS`` followed by
  output lines. The command is run; every shown line must appear in its output, in order, and
  a line ``...`` stands for lines left out.
- **Step-time tables**: Markdown table rows whose first cell names a simulation — a backticked
  ``echo-view simulate ...`` command, ``... ARGS`` (the previous row's command plus ARGS), a
  ``*.toml`` config under ``samples/configs`` or the stem of one. The columns ``step time``,
  ``predicted step s`` and ``predicted (s)`` are compared with the simulated step time,
  ``vs measured`` and ``error`` with its error against the measurement or reference, each at the
  precision the doc prints (``19.901 ms`` is checked to the microsecond).
- **Summary sentences**: the mean and maximum absolute errors of the Korthikanti and Megatron-LM
  CI validation runs (``samples/configs/validation``) that README.md and docs/accuracy.md quote,
  and the headline GPT-175B sample's step, tokens/s per GPU and MFU in docs/workloads.md.

Speed and memory numbers (wall and CPU times, throughput, RSS) are measured, not deterministic,
so they are not checked here; docs/performance.md gives the command that measures each.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.cli import main as cli_main  # noqa: E402

CONFIGS = ROOT / "samples" / "configs"
STEP_COLUMNS = ("step time", "predicted step s", "predicted (s)")
ERROR_COLUMNS = ("vs measured", "error")
_NUMBER = re.compile(r"([+-]?\d[\d,]*(?:\.\d+)?)\s*(%|ms|µs|us|ns|s)?")
_UNIT_S = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}


@dataclass(frozen=True, slots=True)
class Stale:
    """A quoted value that the command no longer gives."""

    file: str
    line: int
    quoted: str
    now: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: quotes {self.quoted!r}, now {self.now!r}"


def run_cli(argv: list[str]) -> str:
    """``echo-view ARGV`` in this process, run from the repository root; its stdout."""
    out = io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out):
        code = cli_main(argv)
    if code not in (0, 1):
        raise RuntimeError(f"echo-view {shlex.join(argv)} exited with {code}")
    return out.getvalue()


_cache: dict[tuple[str, ...], dict[str, Any]] = {}


def simulate_json(argv: list[str]) -> dict[str, Any]:
    """``echo-view simulate ... --json`` (cached per command)."""
    key = tuple(argv)
    if key not in _cache:
        _cache[key] = json.loads(run_cli([*argv, "--json"]))
    return _cache[key]


def _config(name: str) -> Path | None:
    stem = name.removesuffix(".toml")
    found = sorted(CONFIGS.rglob(f"{stem}.toml"))
    return found[0] if len(found) == 1 else None


def _matches(quoted: str, value: float | None) -> tuple[bool, str]:
    """Whether ``value`` (seconds, or percent for ``%`` cells) prints as ``quoted`` does."""
    m = _NUMBER.search(quoted)
    if m is None or value is None:
        return value is None and m is None, "-" if value is None else f"{value:g}"
    text, unit = m.group(1).replace(",", ""), m.group(2)
    decimals = len(text.partition(".")[2])
    shown = value if unit == "%" else value / _UNIT_S[unit or "s"]
    now = f"{shown:.{decimals}f}"
    sign = "+" if text.startswith("+") and shown >= 0 else ""
    suffix = {None: "", "%": "%"}.get(unit, f" {unit}")
    return abs(float(now) - float(text)) < 0.5 * 10**-decimals, f"{sign}{now}{suffix}"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _row_argv(first: str, previous: list[str] | None) -> list[str] | None:
    """The ``simulate`` arguments a table row's first cell names, if it names a real input."""
    cell = first.strip("`* ")
    try:
        if cell.startswith("echo-view simulate "):
            argv = shlex.split(cell)[1:]
            return argv if (ROOT / argv[1]).exists() else None  # not a synopsis like INPUT
        if cell.startswith("... ") and previous is not None:
            return [*previous, *shlex.split(cell[4:])]
    except (ValueError, IndexError):
        return None
    config = _config(cell) if re.fullmatch(r"[\w.-]+", cell) else None
    return ["simulate", str(config.relative_to(ROOT))] if config is not None else None


def check_tables(path: Path, rel: str) -> Iterator[Stale]:
    """Stale step-time cells."""
    header: list[str] | None = None
    base: list[str] | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.startswith("|"):
            header, base = None, None
            continue
        cells = _cells(line)
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set(line) <= set("|-: "):
            continue
        argv = _row_argv(cells[0], base)
        if argv is None or not any(h in STEP_COLUMNS for h in header):
            continue
        if not cells[0].strip("`").startswith("..."):
            base = argv
        report = simulate_json(argv)
        for name, quoted in zip(header, cells, strict=False):
            if name in STEP_COLUMNS:
                value = report["step_time_s"]
            elif name in ERROR_COLUMNS:
                value = report.get("error_pct", report.get("reference_error_pct"))
            else:
                continue
            ok, now = _matches(quoted, value)
            if not ok:
                yield Stale(rel, number, quoted, now)


def check_examples(path: Path, rel: str) -> Iterator[Stale]:
    """Stale lines of ``$ echo-view ...`` example blocks."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```") and i + 1 < len(lines):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            block = lines[i + 1 : end]
            if block and block[0].startswith("$ echo-view ") and len(block) > 1:
                if any(b.startswith("$ ") for b in block[1:]):
                    i = end + 1
                    continue  # several commands: a transcript without output
                out = run_cli(shlex.split(block[0][2:])[1:]).splitlines()
                yield from _compare_block(block[1:], out, rel, i + 3)
            i = end + 1
        else:
            i += 1


def _compare_block(shown: list[str], out: list[str], rel: str, first: int) -> Iterator[Stale]:
    pos, skipping = 0, False
    for k, want in enumerate(shown):
        if want.strip() == "...":
            skipping = True
            continue
        if skipping:
            hit = next((j for j in range(pos, len(out)) if out[j].rstrip() == want.rstrip()), None)
            if hit is None:
                yield Stale(rel, first + k, want.strip(), "(no such line in the output)")
                return
            pos, skipping = hit + 1, False
            continue
        got = out[pos].rstrip() if pos < len(out) else "(end of output)"
        if got != want.rstrip():
            yield Stale(rel, first + k, want.strip(), got.strip())
            return
        pos += 1


@functools.cache
def summary_sentences() -> dict[str, list[str]]:
    """Sentences with regenerated numbers, by the file that must quote them (computed once)."""
    rows = {
        p.stem: simulate_json(["simulate", str(p.relative_to(ROOT))])
        for p in sorted((CONFIGS / "validation").glob("*.toml"))
        if p.stem.startswith(("korthikanti-", "megatron-ci-7b"))  # the runs the sentences quote
    }
    errs = {
        prefix: [abs(r["reference_error_pct"]) for n, r in rows.items() if n.startswith(prefix)]
        for prefix in ("korthikanti-", "megatron-ci-7b")
    }
    kor, ci = errs["korthikanti-"], errs["megatron-ci-7b"]
    head = simulate_json(["simulate", "samples/configs/echo-gpt175b-96xH800.toml"])
    t = head["throughput"]
    k_mean, k_max = sum(kor) / len(kor), max(kor)
    c_mean, c_max = sum(ci) / len(ci), max(ci)
    ci_each = " and ".join(
        f"{rows[n]['reference_error_pct']:.1f}%"
        for n in ("megatron-ci-7b-tp1-pp4", "megatron-ci-7b-tp4-pp1")
    )
    return {
        "README.md": [
            f"{k_mean:.2f}% mean absolute error (max {k_max:.1f}%",
            f"on a DGX H100 {ci_each}",
        ],
        "docs/accuracy.md": [
            f"Korthikanti mean |err| {k_mean:.2f}% (max {k_max:.2f}%); "
            f"Megatron-CI mean |err| {c_mean:.2f}% (max {c_max:.2f}%)"
        ],
        "docs/workloads.md": [
            f"{head['step_time_s']:.3f} s per step, {t['tokens_per_s_per_gpu']:,.0f} tokens/s "
            f"per GPU, MFU {100 * t['mfu']:.1f}%"
        ],
    }


def check(files: list[Path]) -> list[Stale]:
    """Every stale quote in ``files``."""
    stale: list[Stale] = []
    for path in files:
        rel = str(path.relative_to(ROOT))
        stale += check_examples(path, rel)
        stale += check_tables(path, rel)
        quoting = rel in ("README.md", "docs/accuracy.md", "docs/workloads.md")
        wanted = summary_sentences().get(rel, []) if quoting else []
        text = " ".join(path.read_text(encoding="utf-8").split())
        stale += [Stale(rel, 0, "(a summary sentence)", s) for s in wanted if s not in text]
    return stale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="Markdown files (README.md, docs/*.md)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a quote is stale")
    args = ap.parse_args()
    files = [p.resolve() for p in args.files] or [
        ROOT / "README.md",
        *sorted(ROOT.glob("docs/*.md")),
    ]
    stale = check(files)
    for s in stale:
        print(s)
    print(f"{len(stale)} stale quote(s) in {len(files)} file(s)")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
