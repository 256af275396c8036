"""The TUI on a job with a thread per event (one lane each): opening it, and the filter keys,
against importing the same file in the same round.

The trace (``--threads`` ``cpu_op`` events, each on a thread of its own, seven names, integer
or fractional µs timestamps) is generated once into ``bench/data/`` (git-ignored). Each round
reads it (the baselines: ``json.load``, then ``read_job`` as ``echo-view tui`` reads it), then
opens the app headless at ``--size`` on the job read and times, to the end of encoding the last
frame each caused:

- open: from starting the app to its first timeline frame (indexing, layout, first render);
- ``h`` (hide events shorter than 1 µs), ``H`` (back to all), a search for ``op3`` (``/`` then
  the query and enter), ``F`` (hide what the search does not match) and ``F`` again.

Each filter key changes what every lane shows; only the lanes on the screen are drawn. Last,
``search()`` alone on an index of the job, for ``op3`` (a seventh of the lanes) and ``op``
(every lane).

    python bench/tui_lanes_bench.py [--threads 100000] [--rounds 3] [--size 160x48] [--fractional]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from textual.pilot import Pilot  # noqa: E402
from tui_bench import TimedApp  # noqa: E402

from echo_view.loading import read_job  # noqa: E402
from echo_view.model import Job  # noqa: E402
from echo_view.tui.index import Source, TimelineIndex  # noqa: E402
from echo_view.tui.search import search  # noqa: E402

DATA = ROOT / "bench" / "data"
KEYS: list[tuple[str, list[str]]] = [
    ("h", ["h"]),
    ("H", ["H"]),
    ("search op3", ["slash", "o", "p", "3", "enter"]),
    ("F", ["F"]),
    ("F again", ["F"]),
]


def _trace(threads: int, fractional: bool) -> Path:
    path = DATA / f"tui_threads_{threads}{'_frac' if fractional else ''}.json"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        frac = 0.125 if fractional else 0
        ev = [
            {"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": i,
             "ts": i + frac, "dur": 1 + i % 5}
            for i in range(threads)
        ]  # fmt: skip
        path.write_text(json.dumps({"traceEvents": ev}))
    return path


async def _press(app: TimedApp, pilot: Pilot[None], keys: list[str]) -> float:
    """Seconds from sending ``keys`` to the end of the last frame they caused: the pilot waits
    until the app has handled them (a filter works inside the key's handler), then frames are
    awaited until the app has been quiet (``TimedApp.quiet``)."""
    app.frame.clear()
    start = time.perf_counter()
    await pilot.press(*keys)
    handled = time.perf_counter()
    await app.quiet()
    return max(handled, app.last_frame) - start


async def _session(job: Job, size: tuple[int, int]) -> dict[str, float]:
    t0 = time.perf_counter()
    app = TimedApp([job], None)
    out: dict[str, float] = {}
    async with app.run_test(size=size) as pilot:
        while app.first_timeline is None:
            if app.error is not None:
                raise app.error
            await asyncio.sleep(0.005)
        out["open"] = app.first_timeline - t0
        await pilot.pause(0.3)
        for name, keys in KEYS:
            out[name] = await _press(app, pilot, keys)
            await pilot.pause(0.3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", default="160x48")
    ap.add_argument("--fractional", action="store_true", help="timestamps with .125 µs")
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.split("x"))
    path = _trace(args.threads, args.fractional)
    rows: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        t = time.perf_counter()
        with path.open("rb") as f:
            json.load(f)
        rows.setdefault("json.load (baseline)", []).append(time.perf_counter() - t)
        t = time.perf_counter()
        job = read_job([path])
        rows.setdefault("import (baseline)", []).append(time.perf_counter() - t)
        for name, secs in asyncio.run(_session(job, (w, h))).items():
            rows.setdefault(name, []).append(secs)
        index = TimelineIndex.build([Source(job, "")])
        for query in ("op3", "op"):  # a seventh of the lanes, every lane
            t = time.perf_counter()
            search(index, query)
            rows.setdefault(f"search() {query}", []).append(time.perf_counter() - t)
    base = statistics.median(rows["import (baseline)"])
    print(f"{path.name}: {args.threads:,} threads, {args.rounds} round(s), {args.size}")
    print("| step | median | per round | median / import |")
    print("|---|---|---|---|")
    for name, vals in rows.items():
        med = statistics.median(vals)
        each = ", ".join(f"{v:.3f}" for v in vals)
        print(f"| {name} | {med:.3f} s | {each} | {med / base:.3f}x |")


if __name__ == "__main__":
    main()
