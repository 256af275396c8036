"""Time on hostile text: the readers that once matched a long token in time quadratic in its
length, each timed at doubling lengths in the same run. Linear code takes about twice as long
at twice the length (the "growth" column); quadratic code four times.

- ``toml comment``: a config whose comment is one run of key characters (``parse_toml``);
- ``toml chains``: text of dotted-key chains one part short of the nesting limit;
- ``kineto tid``: a GPU event whose string ``tid`` is a long run of digits and a letter
  (the importer's stream number, ``importers.kineto.timeline``);
- ``nccl rank line``: an nccl-tests ``# Rank`` line whose device name ends in a run of spaces
  and a letter (``parse_nccl_tests``);
- ``gpu name``: a device name of repeated ``H100`` (``match_gpu``);
- ``size``: a ``--bytes`` value of ``1``, spaces and ``!`` (``parse_size``, refused);
- ``json top string``: a trace with one long string outside ``traceEvents``, read by
  ``read_container`` in 1 MiB blocks.

    python bench/hostile_text_bench.py [--runs 3] [--scale 1]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.cli.sizes import parse_size  # noqa: E402
from echo_view.errors import EchoViewError  # noqa: E402
from echo_view.model.gpus import match_gpu  # noqa: E402
from echo_view.model.toml_file import MAX_TOML_DEPTH, parse_toml  # noqa: E402
from importers.chrome_json import read_container  # noqa: E402
from importers.kineto import KinetoImporter  # noqa: E402
from importers.nccl_tests import parse_nccl_tests  # noqa: E402

LOG = (ROOT / "tests/importers/nccl_tests_data/all_gather_2ranks.log").read_text()


def _quietly(fn: Callable[[], object]) -> None:
    with contextlib.suppress(EchoViewError, ValueError):  # a refusal is the expected end
        fn()


def _cases(tmp: Path) -> dict[str, Callable[[int], Callable[[], object]]]:
    def toml_comment(n: int) -> Callable[[], object]:
        text = "# " + "x" * n + "\ny = 2\n"
        return lambda: parse_toml(text)

    def toml_chains(n: int) -> Callable[[], object]:
        short = "a." * (MAX_TOML_DEPTH - 1) + "#"
        text = short * (n // len(short))
        return lambda: _quietly(lambda: parse_toml(text))

    def kineto_tid(n: int) -> Callable[[], object]:
        path = tmp / f"tid{n}.json"
        tid = "1" * n + "x"
        ev = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": tid, "ts": 1, "dur": 2}
        path.write_text(json.dumps({"traceEvents": [ev]}))
        return lambda: KinetoImporter().read([path])

    def nccl_rank_line(n: int) -> Callable[[], object]:
        lines = LOG.splitlines()
        i = next(k for k, line in enumerate(lines) if line.startswith("#  Rank"))
        lines[i] += " " * min(n, 60_000) + "x"  # (lines are capped at 65,535 characters)
        text = "\n".join(lines) + "\n"
        return lambda: parse_nccl_tests("run.log", text)

    def gpu_name(n: int) -> Callable[[], object]:
        name = "H100" * (n // 4)
        return lambda: match_gpu(name)

    def size(n: int) -> Callable[[], object]:
        text = "1" + " " * n + "!"
        return lambda: _quietly(lambda: parse_size(text, "--bytes"))

    def json_top_string(n: int) -> Callable[[], object]:
        path = tmp / f"top{n}.json"
        path.write_text(json.dumps({"big": "a" * (n * 100), "traceEvents": []}))

        def read() -> None:
            with read_container(path) as c:
                list(c.chunks(dict))

        return read

    return {
        "toml comment": toml_comment,
        "toml chains": toml_chains,
        "kineto tid": kineto_tid,
        "nccl rank line": nccl_rank_line,
        "gpu name": gpu_name,
        "size": size,
        "json top string": json_top_string,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scale", type=int, default=1, help="multiplies every length")
    args = ap.parse_args()
    lengths = [20_000 * args.scale * 2**k for k in range(3)]
    with tempfile.TemporaryDirectory() as d:
        cases = _cases(Path(d))
        print(f"lengths {', '.join(f'{n:,}' for n in lengths)} characters "
              f"(json top string: x100); medians of {args.runs} runs")  # fmt: skip
        print("| case | " + " | ".join(f"{n:,}" for n in lengths) + " | growth per doubling |")
        print("|---|" + "---|" * len(lengths) + "---|")
        for name, make in cases.items():
            times = []
            for n in lengths:
                fn = make(n)
                runs = []
                for _ in range(args.runs):
                    t = time.perf_counter()
                    fn()
                    runs.append(time.perf_counter() - t)
                times.append(statistics.median(runs))
            growth = [b / a for a, b in itertools.pairwise(times) if a > 0]
            cells = " | ".join(f"{t * 1000:.1f} ms" for t in times)
            print(f"| {name} | {cells} | {', '.join(f'{g:.1f}x' for g in growth)} |")


if __name__ == "__main__":
    main()
