"""``echo-view comm COLLECTIVE --bytes N --ranks R [...]``: how long one NCCL collective takes.

Prints, per message size, the predicted time, the algorithm / protocol / channel count NCCL
would pick, and the algorithm and bus bandwidths (nccl-tests' definitions, GB/s), from the
NCCL-like model with the shipped calibrated constants or those of ``--model FILE.toml``
(written by ``echo-view calibrate comm``). Sizes accept units: ``64MiB``, ``1GB``, ``4K``
(K/M/G like nccl-tests are binary), a comma list, or a sweep ``8:1GiB`` (doubling).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, cast

from rich import box
from rich.console import Console
from rich.table import Table

from echo_view.cli.console import console
from echo_view.cli.numargs import float_arg, int_arg, put_setting
from echo_view.cli.pathargs import path_arg
from echo_view.cli.sizes import parse_sizes
from echo_view.errors import ConfigError, UsageError, warn_deprecated
from echo_view.formats import Registry, json_text
from echo_view.model import CollectiveKind, collective_kind_from_name
from echo_view.model.job import MAX_RANKS
from echo_view.model.schema import json_schema
from echo_view.model.toml_file import read_toml_text
from echo_view.sim.cluster import Cluster, gpu_preset, known_presets, make_cluster
from echo_view.sim.comm import (
    AlphaBetaModel,
    CollectiveEstimate,
    NcclModel,
    comm_model_from_toml,
)
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.text import markup_safe


def parse_collective(name: str) -> CollectiveKind:
    kind = collective_kind_from_name(name)
    if kind == CollectiveKind.UNKNOWN:
        known = ", ".join(k.label for k in CollectiveKind if k != CollectiveKind.UNKNOWN)
        raise UsageError(f"unknown collective {name!r}", hint=f"one of: {known}")
    return kind


def parse_sets(items: list[str] | None) -> dict[str, str]:
    """``KEY=VALUE`` pairs (a ``cluster.`` prefix is accepted and dropped)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set {item!r} is not KEY=VALUE", hint="e.g. --set cpu=amd")
        put_setting(out, key.strip().removeprefix("cluster."), value.strip())
    return out


def load_model(path: Path | None) -> NcclModel | AlphaBetaModel:
    """The model of ``--model FILE.toml``, or the simulator's default: the NCCL-like model
    calibrated on the Echo nccl-tests logs (:mod:`echo_view.sim.comm.defaults`)."""
    if path is None:
        return default_comm_model()
    return comm_model_from_toml(read_toml_text(path), str(path))


def add_cluster_options(p: argparse.ArgumentParser, *, gpu_default: str | None) -> None:
    """``--gpu``, ``--gpus-per-node``, ``--nic-gbytes-per-s``, ``--set``."""
    p.add_argument(
        "--gpu",
        default=gpu_default,
        metavar="NAME",
        help=f"GPU preset ({', '.join(known_presets())})"
        + (f"; default {gpu_default}" if gpu_default else "; default: from the log"),
    )
    p.add_argument(
        "--gpus-per-node", type=int_arg, metavar="G", help="GPUs per node (default: preset's 8)"
    )
    p.add_argument(
        "--nic-gbytes-per-s",
        type=float_arg,
        metavar="GBPS",
        help="NIC bandwidth per GPU in GB/s, e.g. 50 for 400 Gb/s (default: the GPU's "
        "reference system)",
    )
    p.add_argument("--nic-gbps-per-gpu", type=float_arg, help=argparse.SUPPRESS)  # deprecated
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a cluster value (cpu=amd, fabric=pcie, nvlink_gbytes_per_s=150, ...)",
    )


def nic_option(args: argparse.Namespace) -> float | None:
    """``--nic-gbytes-per-s`` (GB/s), or the deprecated ``--nic-gbps-per-gpu`` (Gb/s)."""
    old = args.nic_gbps_per_gpu
    if old is None:
        return cast(float | None, args.nic_gbytes_per_s)
    gbytes = float(old) / 8
    warn_deprecated(
        "--nic-gbps-per-gpu",
        "--nic-gbytes-per-s (GB/s)",
        f" ({old:g} Gb/s read as {gbytes:g} GB/s)",
    )
    return gbytes


def register(subparsers: Any) -> None:
    """Add the ``comm`` sub-command."""
    p = subparsers.add_parser(
        "comm",
        description="Predict how long one NCCL collective takes and how NCCL runs it "
        "(algorithm, protocol, channels), with algorithm and bus bandwidths as nccl-tests "
        "reports them. Ranks fill nodes in order unless --ranks-per-node spreads them.",
    )
    p.add_argument("collective", metavar="COLLECTIVE", help="all_reduce, all_gather, ...")
    p.add_argument(
        "--bytes",
        required=True,
        metavar="N",
        help="payload per rank: 1048576, 64MiB, 1GB, a list 1MiB,1GiB or a sweep 8:1GiB",
    )
    p.add_argument("--ranks", required=True, type=int_arg, metavar="R", help="ranks in the group")
    p.add_argument(
        "--ranks-per-node",
        type=int_arg,
        metavar="K",
        help="place only K of the group's ranks on each node (e.g. 1 for a data-parallel "
        "group across tensor-parallel nodes)",
    )
    add_cluster_options(p, gpu_default="A100")
    p.add_argument("--model", type=path_arg, metavar="FILE.toml", help="calibrated constants")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def group_ranks(ranks: int, per_node: int, gpus_per_node: int) -> list[int]:
    """``ranks`` global rank ids with ``per_node`` of them on each node."""
    return [
        (i // per_node) * gpus_per_node + i % per_node for i in range(ranks)
    ]  # fmt: skip


def build_cluster(args: argparse.Namespace, ranks: int) -> tuple[Cluster, int]:
    """The cluster of the command line, with enough nodes for the group, and the group's
    ranks per node."""
    sets = parse_sets(args.set)
    flags = {}  # the cluster keys the command's own flags set, by the flag's name
    if args.gpus_per_node is not None:
        sets["gpus_per_node"] = str(args.gpus_per_node)
        flags["gpus_per_node"] = "--gpus-per-node"
    nic = nic_option(args)
    if nic is not None:
        flags["nic_gbytes_per_s"] = "--nic-gbytes-per-s"
    nodes_given = sets.pop("nodes", None)
    spec = gpu_preset(args.gpu, where="--gpu")
    try:
        cluster = make_cluster(spec, nic_gbytes_per_s=nic).with_overrides(sets)
    except ConfigError as exc:  # a value a flag gave: the error names the flag, not the key
        key = (exc.where or "").removeprefix("cluster.")
        prefix = f"cluster key {key!r}"
        if key not in flags or not exc.message.startswith(prefix):
            raise
        raise UsageError(flags[key] + exc.message.removeprefix(prefix), hint=exc.hint) from None
    gpn = cluster.gpus_per_node
    per_node = args.ranks_per_node if args.ranks_per_node is not None else min(ranks, gpn)
    if not 1 <= per_node <= gpn:
        raise UsageError(f"--ranks-per-node must be between 1 and the node's {gpn} GPUs")
    nodes = -(-ranks // per_node)
    if nodes_given is not None:
        cluster = cluster.with_overrides({"nodes": nodes_given})
        if cluster.nodes < nodes:
            raise ConfigError(
                f"{ranks} ranks at {per_node} per node need {nodes} nodes, the cluster has "
                f"{cluster.nodes}",
                where="cluster.nodes",
            )
        return cluster, per_node
    return cluster.with_overrides({"nodes": nodes}), per_node


def result_json(
    kind: CollectiveKind, nbytes: int, ranks: list[int], cluster: Cluster, est: CollectiveEstimate
) -> dict[str, Any]:
    nodes = len({cluster.node_of(r) for r in ranks})
    return {
        "collective": kind.label,
        "bytes": nbytes,
        "ranks": len(ranks),
        "nodes": nodes,
        "time_us": est.time_ns / 1e3,
        "algorithm": est.algorithm,
        "protocol": est.protocol,
        "channels": est.channels,
        "algbw_gbytes_per_s": est.algbw_bytes_per_s / 1e9,
        "busbw_gbytes_per_s": est.busbw_bytes_per_s / 1e9,
        "nccl_tuner_time_us": None if est.nccl_time_ns is None else est.nccl_time_ns / 1e3,
        "timed_as": est.assumed,
    }


def run(args: argparse.Namespace, registry: Registry) -> int:
    """Estimate each size, print a table or JSON (an object for one size; for several,
    ``{"cluster", "model", "results": [...]}``)."""
    del registry
    kind = parse_collective(args.collective)
    sizes = parse_sizes(args.bytes, "--bytes")
    if kind == CollectiveKind.BARRIER and sizes != [4]:
        # Timed as the one-element all-reduce it is: other sizes timed an all-reduce of them.
        raise UsageError(
            "--bytes: a barrier moves one 4-byte element (PyTorch's barrier all-reduces it); "
            "give --bytes 4, or time all_reduce for other sizes"
        )
    if not 1 <= args.ranks <= MAX_RANKS:
        raise UsageError(f"--ranks must be between 1 and {MAX_RANKS:,}, got {args.ranks}")
    model = load_model(args.model)
    cluster, per_node = build_cluster(args, args.ranks)
    ranks = group_ranks(args.ranks, per_node, cluster.gpus_per_node)
    rows = [
        result_json(kind, n, ranks, cluster, model.estimate(kind, n, ranks, cluster)) for n in sizes
    ]
    if args.json:
        context = {"cluster": cluster.describe(), "model": model.params.source}
        out = {**rows[0], **context} if len(rows) == 1 else {**context, "results": rows}
        sys.stdout.write(json_text({"schema": json_schema("comm"), **out}))
        return 0
    render(kind, rows, cluster, model, console())
    return 0


def format_bytes(n: int) -> str:
    """``67108864`` -> ``64 MiB``; sizes that are not whole KiB stay in bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def render(
    kind: CollectiveKind,
    rows: list[dict[str, Any]],
    cluster: Cluster,
    model: NcclModel | AlphaBetaModel,
    console: Console,
) -> None:
    first = rows[0]
    d = cluster.describe()
    console.print(
        f"{kind.label} over {first['ranks']} ranks on {first['nodes']} node(s) of "
        f"{cluster.gpus_per_node} x {markup_safe(d['gpu'])} ({d['fabric']}, "
        f"NVLink {d['nvlink_gbytes_per_s']:g} GB/s, NIC {d['nic_gbytes_per_s']:g} GB/s per GPU)"
    )
    console.print(f"model: {markup_safe(model.name)}, {markup_safe(model.params.source)}")
    table = Table(box=box.SIMPLE_HEAD)
    for col in ("bytes", "time µs", "algorithm", "protocol", "channels", "algbw GB/s",
                "busbw GB/s", "NCCL tuner µs"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("algorithm", "protocol") else "right")
    for r in rows:
        tuner = r["nccl_tuner_time_us"]
        table.add_row(
            format_bytes(r["bytes"]),
            f"{r['time_us']:,.2f}",
            r["algorithm"],
            r["protocol"],
            str(r["channels"]),
            f"{r['algbw_gbytes_per_s']:.2f}",
            f"{r['busbw_gbytes_per_s']:.2f}",
            "-" if tuner is None else f"{tuner:,.2f}",
        )
    console.print(table)
    if first["timed_as"]:
        console.print(f"note: timed as {first['timed_as']}")
