"""``echo_view.sim.runs``: knobs are checked before anything runs, with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from echo_view.errors import ConfigError
from echo_view.loading import load_workload
from echo_view.sim.runs import (
    WORKLOAD_KEYS,
    check_keys,
    scale_value,
    simulate_workload,
)


def test_unknown_knobs_name_the_input_kind_and_the_known_ones() -> None:
    check_keys({"comm.scale": "2"}, workload=False)
    with pytest.raises(ConfigError) as err:
        check_keys({"compute.gemm_eff_max": "0.7"}, workload=False)
    text = str(err.value)
    assert "unknown knob 'compute.gemm_eff_max' for a measured job" in text
    assert "comm.scale" in text and "\n" not in text
    check_keys({"compute.gemm_eff_max": "0.7"}, workload=True)
    # The parameter sets' class attributes (NOUN) are no knobs.
    assert not [k for k in WORKLOAD_KEYS if "NOUN" in k]
    assert {"cluster.net_latency_us", "compute.kernel_gap_ns"} <= set(WORKLOAD_KEYS)


@pytest.mark.parametrize(
    ("key", "says"),
    [
        # A config key that changes the graph or the layout: edit the config or use plan.
        ("parallel.tp", "'parallel.tp' is not a simulation knob"),
        ("model.layers", "'model.layers' is not a simulation knob"),
        ("batch.global", "'batch.global' is not a simulation knob"),
        # A misspelt knob is one: the nearest is suggested.
        ("parallel.tp_comm_overlp", "did you mean 'parallel.tp_comm_overlap'"),
        ("bogus.x", "unknown knob 'bogus.x'"),
    ],
)
def test_config_keys_that_are_no_knobs(key: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_keys({key: "1"}, workload=True)
    text = str(err.value)
    assert says in text and "\n" not in text
    if "simulation knob" in text:
        assert "echo-view plan" in text
        assert ("parallel.overlap_param_gather" in text) == key.startswith("parallel.")


# "１２" (full-width digits) and "1_2" read as 12 through float(), unlike every other knob.
@pytest.mark.parametrize("value", ["-1", "nan", "inf", "fast", "１２", "1_2"])
def test_scale_values_are_finite_and_not_negative(value: str) -> None:
    with pytest.raises(ConfigError, match=r"comm\.scale"):
        scale_value("comm.scale", value)
    assert scale_value("comm.scale", "0.5") == 0.5


def test_host_knobs_reach_the_host_path() -> None:
    assert "host.kernel_us" in WORKLOAD_KEYS
    path = Path(__file__).resolve().parents[2] / "samples/configs/megatron-ci-small/tp1-pp2.toml"
    cfg, graph, _, _ = load_workload(path)
    on = simulate_workload(cfg, graph).step_ns
    off = simulate_workload(cfg, graph, {"host.kernel_us": "0"}).step_ns
    slow = simulate_workload(cfg, graph, {"host.kernel_us": "100"}).step_ns
    assert off < on < slow
    with pytest.raises(ConfigError, match="kernel_us"):
        simulate_workload(cfg, graph, {"host.kernel_us": "-5"})
