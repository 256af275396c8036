"""``plan`` on the published runs of samples/configs/validation: does the layout it ranks first
match the published one (or is it one it predicts faster), and does the memory model let the
published layout through?

    python bench/plan_validation.py [--search tp,pp] [--only SUBSTRING ...]

For every config: the memory verdict of the published layout. For those given by ``--only``
(default: none; ``--only ''`` for all): the search over ``--search`` on the config's GPU count,
the published layout's rank and the predicted gain of the first. Graphs come from beside the
config, the cache, or are traced (torch).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.cli.plan import PlanGraphs, run_serial  # noqa: E402
from echo_view.loading import load_config  # noqa: E402
from echo_view.sim.plan import (  # noqa: E402
    check_memory,
    enumerate_layouts,
    group_by_chunks,
    layout_name,
    parse_dimensions,
    rank,
    retarget,
)

RUNS = ROOT / "samples" / "configs" / "validation"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--search", default="tp,pp")
    ap.add_argument("--only", action="append", default=[])
    args = ap.parse_args()
    dims = parse_dimensions(args.search)
    print("| run | published layout | needs (GB) | verdict | searched | rank | first | gain |")
    print("|---|---|---:|---|---:|---:|---|---:|")
    for path in sorted(RUNS.glob("*.toml")):
        cfg = load_config(path)
        verdict = check_memory([cfg])[0]
        row = [path.stem, layout_name(cfg), f"{verdict.needed_bytes / 1e9:.1f}",
               "fits" if verdict.fits else "OOM"]  # fmt: skip
        if any(o in path.stem for o in args.only):
            base = retarget(cfg, cfg.cluster.gpus, None)
            valid, _, _ = enumerate_layouts(base, dims)
            groups = group_by_chunks(check_memory(valid))
            graph_for = PlanGraphs(path, base)
            ranked = rank(r for part in run_serial(groups, graph_for) for r in part)
            names = [r.layout for r in ranked]
            mine = layout_name(cfg)
            at = names.index(mine) + 1 if mine in names else None
            gain = ""
            if at is not None and ranked:
                pub = ranked[at - 1].step_time_s
                gain = f"{100 * (1 - ranked[0].step_time_s / pub):.1f}%"
            row += [str(len(ranked)), str(at) if at else "pruned", names[0] if names else "-", gain]
        else:
            row += ["", "", "", ""]
        print("| " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
