"""Calibration files with random mistakes (the shipped comm model, a fitted interference
model): loading raises a one-line ConfigError/InputError, or the model it returns predicts
finite, non-negative times - it never fails later inside a simulation."""

from __future__ import annotations

import copy
import math
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from echo_view.errors import EchoViewError
from echo_view.model import CollectiveKind
from echo_view.model.gpus import gpu_preset
from echo_view.model.toml_file import read_toml_doc
from echo_view.sim.cluster import make_cluster
from echo_view.sim.comm import comm_model_from_mapping
from echo_view.sim.compute_presets import compute_params_from_doc
from echo_view.sim.interference import InterferenceModel, model_from_doc, model_to_toml
from echo_view.sim.interference.fit import CLASSES, KernelFeatures, fit
from echo_view.sim.kernel_cost import op_times_ns
from tests.fuzz_data import ODD_VALUES, SETTINGS
from tests.sim.interference.interference_data import FACTORS, synthetic

COMM = tomllib.loads(
    (Path(__file__).parents[3] / "echo_view" / "sim" / "comm" / "calibrated.toml").read_text(
        encoding="utf-8"
    )
)
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**12), ODD_VALUES
)


def _leaves(doc: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _leaves(v, (*prefix, k))]
    return [prefix]


COMM_LEAVES = _leaves(COMM)


def _set(doc: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    node = doc
    for k in keys[:-1]:
        node = node[k]
    if value is None or value == "<delete>":  # TOML has no null: None deletes too
        node.pop(keys[-1], None)
    else:
        node[keys[-1]] = value


@SETTINGS
@given(
    picks=st.lists(
        st.tuples(st.sampled_from(COMM_LEAVES), st.one_of(st.just("<delete>"), NUMBERS)),
        min_size=1,
        max_size=3,
    )
)
def test_comm_model_mistakes(picks: list[tuple[tuple[str, ...], Any]]) -> None:
    doc = copy.deepcopy(COMM)
    for keys, value in picks:
        _set(doc, keys, value)
    try:
        model = comm_model_from_mapping(doc, "comm.toml")
    except EchoViewError as err:
        assert "\n" not in str(err) and "comm.toml" in str(err), str(err)
        return
    cluster = make_cluster("A100", gpus_per_node=8, nodes=2)
    for kind in (CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER, CollectiveKind.SEND):
        for nbytes in (1 << 10, 1 << 26):
            t = model.estimate(kind, nbytes, range(16), cluster).time_ns
            assert isinstance(t, int) and t >= 0, (kind, nbytes, t)


FITTED = fit(synthetic(FACTORS, excess=True), "fitted")
FITTED_TEXT = model_to_toml(InterferenceModel(FITTED, "synthetic", {}))
INTF = tomllib.loads(FITTED_TEXT)
INTF_LEAVES = _leaves(INTF)


@SETTINGS
@given(
    picks=st.lists(
        st.tuples(st.sampled_from(INTF_LEAVES), st.one_of(st.just("<delete>"), NUMBERS)),
        min_size=1,
        max_size=3,
    )
)
def test_interference_model_mistakes(picks: list[tuple[tuple[str, ...], Any]]) -> None:
    doc = copy.deepcopy(INTF)
    for keys, value in picks:
        _set(doc, keys, value)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "interference.toml"
        path.write_text(_toml(doc), encoding="utf-8")
        try:
            model = model_from_doc(read_toml_doc(path))
        except EchoViewError as err:
            assert "\n" not in str(err) and path.name in str(err), str(err)
            return
    feats = KernelFeatures.of_classes(np.arange(len(CLASSES)), [2_000] * len(CLASSES))
    s = model.fit.slowdown(feats)
    assert np.isfinite(s).all() and (s >= 1.0).all(), s


COMPUTE_KEYS = (
    "gemm_eff_max", "gemm_half_flops", "attn_eff_max", "attn_half_flops", "mem_eff_max",
    "mem_half_bytes", "kernel_min_ns", "kernel_gap_ns", "bogus",
)  # fmt: skip


@SETTINGS
@given(
    picks=st.dictionaries(st.sampled_from(COMPUTE_KEYS), NUMBERS.filter(lambda v: v is not None),
                          min_size=1, max_size=4),
)  # fmt: skip
def test_compute_file_mistakes(picks: dict[str, Any]) -> None:
    gpu = gpu_preset("A100")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "compute.toml"
        path.write_text(_toml_gpu(gpu.name, picks), encoding="utf-8")
        try:
            params = compute_params_from_doc(read_toml_doc(path), gpu)
        except EchoViewError as err:
            assert "\n" not in str(err) and path.name in str(err), str(err)
            return
    cls = np.array([0, 1, 2, 9])
    t = op_times_ns(cls, np.full(4, 1e12), np.full(4, 1e8), np.full(4, 3e14), gpu, params)
    assert (t >= 0).all(), t


def _toml_gpu(name: str, values: dict[str, Any]) -> str:
    body = _toml(values)
    return f'[gpu."{name}"]\n' + body


def _toml(doc: dict[str, Any]) -> str:
    """A TOML writer for what these documents hold (tables of scalars and lists)."""

    def val(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float) and not math.isfinite(v):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if isinstance(v, float):
            return repr(v)
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f'"{k}" = {val(x)}' for k, x in v.items()) + "}"
        raise TypeError(type(v))

    lines: list[str] = []
    for k, v in doc.items():
        if not isinstance(v, dict):
            lines.append(f'"{k}" = {val(v)}')
    for k, v in doc.items():
        if isinstance(v, dict):
            lines.append(f'["{k}"]')
            lines += [f'"{kk}" = {val(vv)}' for kk, vv in v.items()]
    return "\n".join(lines) + "\n"
