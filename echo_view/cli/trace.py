"""``echo-view trace CONFIG.toml -o GRAPH.json[.gz]``: trace every rank role of a workload
config on the meta device (no GPU) and write the versioned traced-graph JSON.

``echo-view trace --script FILE.py[:FUNCTION] --world N [--set KEY=VALUE ...] -o GRAPH``
traces a user's own training step instead (:mod:`echo_view.tracing.script`); ``--set`` values
are the function's keyword arguments (integers, floats, ``true``/``false`` or text)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from echo_view.cli.numargs import check_timeout, float_arg, int_arg
from echo_view.cli.pathargs import output_arg, path_arg
from echo_view.cli.simulate import parse_overrides
from echo_view.errors import InputError, UsageError
from echo_view.formats import Registry, check_input, check_output
from echo_view.loading import load_config, torch_missing, trace_config, trace_script_config
from echo_view.model.config import LIMITS, split_script
from echo_view.text import printable
from exporters.graph import write_graph


def register(subparsers: Any) -> None:
    """Add the ``trace`` sub-command."""
    p = subparsers.add_parser(
        "trace",
        description="Build each pipeline-stage role of a Megatron-style GPT on the meta "
        "device, record one micro-batch's forward and backward and the optimizer step, and "
        "write the traced graph that `echo-view simulate` accepts. With --script (or a "
        "config's [model] script), run a PyTorch training step on fake tensors and a fake "
        "process group instead. Needs torch (the `trace` extra).",
    )
    p.add_argument("config", type=path_arg, metavar="CONFIG.toml", nargs="?")
    p.add_argument("-o", "--output", type=output_arg, required=True, metavar="GRAPH.json")
    p.add_argument(
        "--script",
        metavar="FILE.py[:FUNCTION]",
        help="trace this training step (FUNCTION defaults to train_step) instead of a config",
    )
    p.add_argument("--world", type=int_arg, metavar="N", help="ranks of the --script run")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a keyword argument of the --script function (repeatable)",
    )
    p.add_argument(
        "--timeout",
        type=float_arg,
        default=None,
        metavar="SECONDS",
        help="time limit of one traced rank: importing the script and its step (default 600)",
    )
    p.set_defaults(func=run)


def script_value(text: str) -> Any:
    """A ``--set`` value as the script gets it: int, float, bool, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def run(args: argparse.Namespace, registry: Registry) -> int:
    del registry
    out: Path = args.output
    if not out.name.lower().endswith((".json", ".json.gz")):
        raise UsageError(
            f"cannot write a traced graph to {out.name!r}", hint="use .json or .json.gz"
        )
    if (args.config is None) == (args.script is None):
        raise UsageError(
            "give either CONFIG.toml or --script FILE.py[:FUNCTION]",
            hint="echo-view trace --script train.py --world 8 -o graph.json.gz",
        )
    check_timeout(args.timeout)
    t0 = time.perf_counter()
    if args.script is not None:
        trace = _trace_script(args)
        graph = trace.graph
        reason = f": {trace.reason}"
    else:
        if args.world is not None or args.set:
            raise UsageError("--world and --set go with --script (a config sets its own)")
        cfg = load_config(args.config)
        if cfg.model.script is not None:
            trace = trace_script_config(cfg, args.timeout)
            graph, reason = trace.graph, f": {trace.reason}"
        else:
            if args.timeout is not None:  # it was accepted and did nothing
                raise UsageError(
                    "--timeout limits a traced script; this config traces the built-in model",
                    hint="drop --timeout, or trace a script (--script, or [model] script)",
                )
            graph, reason = trace_config(cfg), ""
    write_graph(graph, out)
    print(
        f"traced {len(graph.roles)} role(s){printable(reason)}; {graph.op_count()} ops in "
        f"{time.perf_counter() - t0:.1f} s -> {printable(str(out))}",
        file=sys.stderr,
    )
    return 0


def _trace_script(args: argparse.Namespace) -> Any:
    # What can be checked without torch first: importing it takes seconds.
    world = args.world
    if world is None or not 1 <= world <= LIMITS["gpus"]:
        raise UsageError(
            f"--script needs --world N, 1 <= N <= {LIMITS['gpus']:,}"
            + (f" (got {world})" if world is not None else ""),
            hint="the number of ranks the step runs on",
        )
    script = Path(split_script(args.script)[0])
    if script.suffix == ".py":
        check_input(script, directory_ok=False, wants="a Python script")
        if not script.exists():
            raise InputError("no such script", path=script, hint="give FILE.py[:FUNCTION]")
    try:
        from echo_view.tracing.script import DEFAULT_TIMEOUT_S, ScriptSpec, trace_script
    except ImportError as exc:
        raise torch_missing(exc, "tracing a script") from exc
    spec = ScriptSpec.parse(args.script)  # (a .py path: checked above)
    check_output(args.output, [spec.path])
    required = {k: script_value(v) for k, v in parse_overrides(args.set).items()}
    timeout = DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout
    return trace_script(spec, world, required=required, timeout_s=timeout)
