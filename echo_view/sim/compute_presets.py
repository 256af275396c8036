"""Kernel cost parameters per GPU generation.

The efficiencies of :class:`~echo_view.sim.kernel_cost.ComputeParams` are properties of a GPU
and its math libraries, not of a workload, so echo-view keeps one set per GPU generation. The
values and the data each was fitted on are listed in ``docs/accuracy.md``; ``echo-view
calibrate compute`` and ``--set compute.<name>=...`` replace them.
"""

from __future__ import annotations

from pathlib import Path

from echo_view.errors import ConfigError, InputError
from echo_view.model.toml_file import read_toml
from echo_view.sim.cluster import GpuSpec
from echo_view.sim.kernel_cost import ComputeParams

# A100: large fp16 GEMMs reach 74% of the 312 TFLOP/s peak in Megatron-LM (one parameter
# fitted on the eight Korthikanti et al. 2022 runs, Selene DGX A100; docs/accuracy.md).
_A100 = ComputeParams(gemm_eff_max=0.74)
# Hopper (H100, and H800/H200 with the same SMs): 55% of the 989 TFLOP/s bf16 peak, fitted on
# the two Megatron-LM CI 7B runs on a DGX H100 (Transformer Engine, deterministic mode).
_HOPPER = ComputeParams(gemm_eff_max=0.55)

#: Parameters by GPU family (the preset name's first token, e.g. ``A100``).
_BY_FAMILY: dict[str, ComputeParams] = {
    "A100": _A100,
    "H100": _HOPPER,
    "H800": _HOPPER,
    "H200": _HOPPER,
}


def gpu_family(gpu: GpuSpec) -> str:
    """``A100`` for ``A100-SXM4-80GB``."""
    return gpu.name.split("-")[0]


def compute_params_for(gpu: GpuSpec) -> ComputeParams:
    """The cost parameters for ``gpu`` (generic defaults for a family without its own set)."""
    return _BY_FAMILY.get(gpu_family(gpu), ComputeParams())


def compute_params_from_toml(
    path: str | Path, gpu: GpuSpec, base: ComputeParams | None = None
) -> ComputeParams:
    """The parameters a ``calibrate compute`` file holds for ``gpu``: its ``[gpu."NAME"]``
    table for the GPU's preset name, else for a GPU of the same family; values it does not
    hold keep ``base`` (default: :func:`compute_params_for`)."""
    file = Path(path)
    doc = read_toml(file)
    tables = doc.get("gpu")
    if not isinstance(tables, dict) or not tables:
        raise InputError(
            'no [gpu."NAME"] table', path=file, hint="write it with echo-view calibrate compute"
        )
    name = gpu.name.removesuffix(" (modified)")
    key = name if name in tables else None
    if key is None:
        family = [k for k in tables if k.split("-")[0] == gpu_family(gpu)]
        key = family[0] if family else None
    if key is None:
        raise ConfigError(
            f"the compute file has no parameters for {name}",
            path=file,
            hint=f"it holds: {', '.join(tables)}",
        )
    table = tables[key]
    if not isinstance(table, dict):
        raise InputError("not a table", path=file, where=f'gpu."{key}"')
    values = {k: v for k, v in table.items() if not isinstance(v, dict)}
    try:
        return (base or compute_params_for(gpu)).with_overrides(values)
    except ConfigError as exc:
        raise ConfigError(exc.message, path=file, where=f'gpu."{key}"', hint=exc.hint) from exc
