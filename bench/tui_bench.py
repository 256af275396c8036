"""TUI speed, measured inside the app: opening a 1 M-event job against importing it, and the time
from a key press to the encoded frame for zoom and pan.

The real 8-rank DLRM sample (``samples/dlrm_kineto``) is replicated in time with
``bench/export_bench.py``'s ``replicate`` (shifted copies, ids renumbered) until the imported job
holds at least ``--events`` events, and written as 8 plain Kineto JSON files.

- Baseline: the Kineto importer reading that directory (median of ``--repeat`` runs).
- Open: what ``echo-view tui`` does, headless at ``--size`` on the same directory, from the
  start of the command to its first timeline frame: the import (before the app starts, as the
  command reads its inputs), then the app on the job (indexing in the loading worker, layout,
  first render).
  Frames are encoded to terminal escape sequences as for a real terminal (headless Textual
  skips that step, so the benchmark does it).
- Keys: ``--keys`` presses of zoom (w/s) and pan (a/d, arrows) in a fixed pattern over several
  zoom levels, each sent through the app's driver and timed to the end of encoding the next
  frame the key caused (the last frame before the app has been quiet for 50 ms). Every frame is
  a cold render: zoom and pan change every row.
  The same pattern runs on the original sample as a small-job reference.
  While idle the timeline draws the views the next zoom or pan would show; a key that comes
  before that is done draws its rows cold. With ``--repeat`` >= 2 the second open of the large
  job runs the keys again with that prefetch off (every frame cold).

    python bench/tui_bench.py [--events 1000000] [--repeat 2] [--size 200x50] [--keys 120]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from export_bench import replicate  # noqa: E402
from textual import events  # noqa: E402
from textual._compositor import CompositorUpdate  # noqa: E402
from textual.screen import Screen  # noqa: E402

from echo_view.formats import Progress, no_progress  # noqa: E402
from echo_view.model import Job  # noqa: E402
from echo_view.tui.app import EchoViewApp  # noqa: E402
from echo_view.tui.screens import TimelineScreen  # noqa: E402
from echo_view.tui.timeline import TimelineView  # noqa: E402

SAMPLE = ROOT / "samples" / "dlrm_kineto"
PATTERN = ["w"] * 5 + ["d", "d", "a", "right", "left", "a"] + ["w"] * 4 + ["d", "a", "right"]
PATTERN += ["s"] * 9 + ["left", "d", "a", "right"]
ZOOM, PAN = {"w", "s"}, {"a", "d", "left", "right"}
SETTLE_S = 0.05


class TimedApp(EchoViewApp):
    """Records when each frame has been encoded, and the first timeline frame."""

    def __init__(self, inputs: list[Path | Job], loader: Any) -> None:
        super().__init__(inputs, loader)
        self.frame = asyncio.Event()
        self.last_frame = 0.0
        self.first_timeline: float | None = None

    def _display(self, screen: Screen[Any], renderable: Any) -> None:
        if renderable is not None and not self._batch_count:
            if isinstance(renderable, CompositorUpdate):
                renderable.render_segments(self.console)
            now = time.perf_counter()
            if self.first_timeline is None and isinstance(screen, TimelineScreen):
                self.first_timeline = now
            self.last_frame = now
            self.frame.set()
        super()._display(screen, renderable)

    async def quiet(self) -> None:
        """Wait until no frame has come for SETTLE_S."""
        while True:
            self.frame.clear()
            try:
                await asyncio.wait_for(self.frame.wait(), SETTLE_S)
            except TimeoutError:
                return


async def _session(
    path: Path, size: tuple[int, int], keys: int, loader: Any, prefetch: bool = True
) -> tuple[float, dict[str, float], list[tuple[str, float]]]:
    TimelineView.prefetch = prefetch
    t0 = time.perf_counter()
    # As echo-view tui: read first (its stderr progress is silent when not on a terminal).
    app = TimedApp([loader(path, no_progress)], None)
    lat: list[tuple[str, float]] = []
    async with app.run_test(size=size) as pilot:
        while app.first_timeline is None:
            if app.error is not None:
                raise app.error
            await asyncio.sleep(0.005)
        opened = app.first_timeline - t0
        await pilot.pause(0.2)
        driver = app._driver
        assert driver is not None
        for i in range(keys):
            key = PATTERN[i % len(PATTERN)]
            app.frame.clear()
            start = time.perf_counter()
            event = events.Key(key, key if len(key) == 1 else None)
            event.set_sender(app)
            driver.send_message(event)
            try:
                await asyncio.wait_for(app.frame.wait(), 5.0)
            except TimeoutError:
                continue
            # A key may take more than one frame to show fully: count until the last frame
            # that arrives before the app has been quiet for SETTLE_S.
            await app.quiet()
            lat.append((key, app.last_frame - start))
    return opened, dict(app.timings), lat


def _stats(values: list[float]) -> str:
    ms = sorted(v * 1e3 for v in values)
    if not ms:
        return "no frames"
    p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
    return f"median {statistics.median(ms):6.1f} ms  p90 {p90:6.1f} ms  max {ms[-1]:6.1f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--size", default="200x50")
    parser.add_argument("--keys", type=int, default=120)
    args = parser.parse_args()
    w, h = (int(x) for x in args.size.split("x"))
    size = (w, h)
    from importers.kineto import KinetoImporter

    importer = KinetoImporter()

    def loader(path: Path, progress: Progress) -> Job:
        return importer.read([path], progress)

    sample_events = importer.read([SAMPLE]).event_count()
    copies = -(-args.events // sample_events)
    with tempfile.TemporaryDirectory(prefix="tui_bench.") as tmp:
        d = Path(tmp)
        for f in sorted(SAMPLE.glob("*.json.gz")):
            replicate(f, d / f.name.removesuffix(".gz"), copies)
        size_mb = sum(p.stat().st_size for p in d.iterdir()) / 1e6
        n = sample_events * copies
        print(f"job: {copies} copies of the sample, about {n:,} events, {size_mb:.0f} MB of JSON")
        # Import and open alternate, so that both see the same machine load.
        imports: list[float] = []
        opens: list[float] = []
        lat_big: list[tuple[str, float]] = []
        lat_cold: list[tuple[str, float]] = []
        timings: dict[str, float] = {}
        for r in range(args.repeat):
            gc.collect()
            t = time.perf_counter()
            job = importer.read([d])
            imports.append(time.perf_counter() - t)
            n = job.event_count()
            del job
            gc.collect()
            opened, timings, lat = asyncio.run(
                _session(d, size, args.keys if r < 2 else 0, loader, prefetch=r != 1)
            )
            opens.append(opened)
            (lat_cold if r == 1 else lat_big).extend(lat)
            ratio = opened / imports[-1]
            print(f"  run {r + 1}: import {imports[-1]:.2f} s, open {opened:.2f} s ({ratio:.2f}x)")
    _, _, lat_small = asyncio.run(_session(SAMPLE, size, args.keys, loader))
    t_imp, t_open = statistics.median(imports), statistics.median(opens)
    print(f"terminal {size[0]}x{size[1]}, medians of {args.repeat} runs")
    print(f"import (Kineto importer, baseline)  {t_imp:7.2f} s")
    print(f"open in the TUI (to first frame)     {t_open:7.2f} s   = {t_open / t_imp:.2f}x import")
    paired = statistics.median(o / i for o, i in zip(opens, imports, strict=True))
    print(f"median of the per-run ratios (each open right after its import): {paired:.2f}x")
    inner = ", ".join(f"{k} {v:.2f} s" for k, v in sorted(timings.items()))
    print(f"  inside the app (last run): {inner}")
    print(f"\nkey press -> encoded frame ({args.keys} keys per job)")
    cases = [(f"{n:,} events", lat_big), (f"{sample_events:,} events", lat_small)]
    if lat_cold:
        cases.append((f"{n:,} cold", lat_cold))
    for label, lat in cases:
        for kind, keys in (("zoom", ZOOM), ("pan", PAN)):
            print(f"  {label:>16} {kind:5} {_stats([t for k, t in lat if k in keys])}")
    big = statistics.median([t for _, t in lat_big])
    small = statistics.median([t for _, t in lat_small])
    print(f"  median ratio large/small job: {big / small:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
