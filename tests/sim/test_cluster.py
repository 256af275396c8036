"""GPU presets, device-name matching, and cluster overrides."""

from __future__ import annotations

import dataclasses
import tomllib
import warnings
from pathlib import Path

import pytest

from echo_view.errors import ConfigError, Deprecated
from echo_view.model.config import ClusterConfig
from echo_view.model.config_parse import parse_workload_config
from echo_view.sim.cluster import (
    DEPRECATED_KEYS,
    OVERRIDE_KEYS,
    ClusterKeys,
    cluster_from_config,
    make_cluster,
)
from tests.conftest import SHARED

GB = 1e9
ROOT = Path(__file__).resolve().parents[2]


def test_cluster_layout_and_hash() -> None:
    c = make_cluster("A100-SXM4-40GB", gpus_per_node=8, nodes=4)
    assert c.world_size == 32
    assert [c.node_of(r) for r in (0, 7, 8, 31)] == [0, 0, 1, 3]
    assert c.nic_bytes_per_s_per_gpu == 25 * GB  # 200 Gb/s HDR per GPU, DGX A100
    assert c.nvlink_bw == 300 * GB
    assert hash(c) == hash(make_cluster("A100-SXM4-40GB", gpus_per_node=8, nodes=4))


def test_overrides() -> None:
    c = make_cluster("A100").with_overrides(
        {
            "nic_gbytes_per_s": "50",
            "gpus_per_node": "4",
            "nodes": 3,
            "nvlink_gbytes_per_s": "150",
            "cpu": "AMD",
            "net_latency_us": "2.5",
            "peak_tflops_bf16": "100",
        }
    )
    assert c.nic_bytes_per_s_per_gpu == 50 * GB
    assert (c.gpus_per_node, c.nodes, c.cpu) == (4, 3, "amd")
    assert c.nvlink_bw == 150 * GB
    assert c.net_latency_s == pytest.approx(2.5e-6)
    assert c.gpu.peak_flops["bf16"] == 100e12
    assert c.gpu.peak_flops["fp32"] == 19.5e12
    # The GPU is applied first, so its values can be overridden in the same mapping.
    h = make_cluster("A100").with_overrides({"hbm_gbytes_per_s": "5000", "gpu": "H100"})
    assert h.gpu.hbm_bytes_per_s == 5000 * GB and h.gpu.sm_count == 132
    assert make_cluster("A100").with_overrides({"nvlink_gbytes_per_s": 150}).nvlink_bw == 150 * GB
    assert set(c.describe()) <= set(OVERRIDE_KEYS)  # resolved values read back as overrides
    again = c.with_overrides({"sm_count": 100})
    assert again.gpu.name == "A100-SXM4-80GB (modified)"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("nic_gbs", "1", "unknown cluster key 'nic_gbs'"),
        ("nic_gbytes_per_s", "-5", "must be a number from 0.001 to 1e[+]09 GB/s"),
        ("gpus_per_node", "eight", "needs a number"),
        ("nodes", "0", "must be a number from 1 to 1e[+]06 nodes"),
        # The bounds of a workload config's [cluster]: `comm --gpus-per-node 99999999` ran.
        ("gpus_per_node", "1025", "must be a number from 1 to 1024 GPUs"),
        ("nodes", "1000001", "must be a number from 1 to 1e[+]06 nodes"),
        ("fabric", "ethernet", "unknown fabric"),
        ("cpu", "sparc", "unknown CPU vendor"),
        ("gpu", "Z9", "unknown GPU preset"),
        ("net_latency_us", "-1", "must be a number from 0 to"),
        # Not finite: before the keys were declared, these ran into the NCCL model (traceback).
        ("net_latency_us", "nan", "needs a number, got 'nan'"),
        ("net_latency_us", "inf", "needs a number, got 'inf'"),
        ("peak_tflops_bf16", True, "needs a number"),
    ],
)
def test_bad_overrides(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        make_cluster("A100").with_overrides({key: value})
    if key == "nic_gbs":
        assert all(k in info.value.one_line() for k in OVERRIDE_KEYS)


def test_from_workload_config() -> None:
    cfg = ClusterConfig("H800", gpus_per_node=8, nodes=12,
                        overrides={"nic_gbytes_per_s": 50.0, "cpu": "intel"})  # fmt: skip
    c = cluster_from_config(cfg)
    assert c.gpu.name == "H800-SXM5-80GB" and c.world_size == 96
    assert c.nic_bytes_per_s_per_gpu == 50 * GB
    with pytest.raises(ConfigError):
        cluster_from_config(ClusterConfig("A100", 8, 1, {"bogus": 1}))


def test_every_bandwidth_key_is_gigabytes_per_second() -> None:
    keys = [*OVERRIDE_KEYS, *make_cluster("V100").describe()]
    rates = [k for k in keys if "gb" in k and k != "memory_gb"]
    assert rates and all(k.endswith("_gbytes_per_s") for k in rates), rates
    c = make_cluster("V100").with_overrides({"nvlink_gbytes_per_s": 150, "nic_gbytes_per_s": 50})
    assert (c.nvlink_bw, c.nic_bytes_per_s_per_gpu) == (150 * GB, 50 * GB)
    assert c.describe()["nic_gbytes_per_s"] == 50


@pytest.mark.parametrize(
    ("old", "new", "attr"),
    [
        ("nvlink_gbps", "nvlink_gbytes_per_s", "nvlink_bw"),
        ("pcie_gbps", "pcie_gbytes_per_s", "pcie_bw"),
        ("nic_gbps_per_gpu", "nic_gbytes_per_s", "nic_bytes_per_s_per_gpu"),
    ],
)
def test_gigabit_keys_still_read_with_a_warning_naming_the_new_key(
    old: str, new: str, attr: str
) -> None:
    assert DEPRECATED_KEYS[old] == new and old not in OVERRIDE_KEYS
    with pytest.warns(Deprecated) as caught:
        c = make_cluster("V100").with_overrides({old: "600"})
    assert getattr(c, attr) == 75 * GB  # 600 Gb/s, as before: half a V100's NVLink
    (w,) = caught
    assert str(w.message) == (
        f"cluster.{old} is deprecated: use cluster.{new} in GB/s (600 Gb/s was read as 75 GB/s)"
    )


def test_a_key_given_in_both_spellings_is_refused() -> None:
    # nvlink_gbps=80 warned "read as 10 GB/s", then nvlink_gbytes_per_s=600 silently won.
    with pytest.raises(ConfigError, match="given both as nvlink_gbps and as nvlink_gbytes_per_s"):
        make_cluster("A100").with_overrides({"nvlink_gbps": "80", "nvlink_gbytes_per_s": "600"})


def test_a_misspelt_cluster_key_names_the_nearest() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'nvlink_gbytes_per_s'\?"):
        make_cluster("A100").with_overrides({"nvlnk_gbytes_per_s": 1})


def _configs(root: Path) -> list[Path]:
    return sorted(root.rglob("*.toml"))


@pytest.mark.parametrize("path", _configs(ROOT / "samples" / "configs"), ids=str)
def test_shipped_configs_use_the_current_keys(path: Path) -> None:
    cfg = parse_workload_config(tomllib.loads(path.read_text()), str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error", Deprecated)
        cluster_from_config(cfg.cluster, str(path))


def test_published_runs_with_gigabit_keys_still_load() -> None:
    runs = _configs(SHARED / "validation" / "runs")
    if not runs:
        pytest.skip("../shared/validation/runs is absent (not part of a user checkout)")
    for path in runs:
        cfg = parse_workload_config(tomllib.loads(path.read_text()), str(path))
        shipped = ROOT / "samples" / "configs" / "validation" / path.name
        with pytest.warns(Deprecated, match="nic_gbps_per_gpu is deprecated"):
            old = cluster_from_config(cfg.cluster, str(path))
        new_cfg = parse_workload_config(tomllib.loads(shipped.read_text()), str(shipped))
        # The shipped configs may say more than the published ones (NCCL_ALGO of the run).
        new = dataclasses.replace(cluster_from_config(new_cfg.cluster, str(shipped)), nccl_algo="")
        assert old == new


def test_numeric_keys_are_a_parameter_set_with_a_dgx_a100s_defaults() -> None:
    specs = ClusterKeys.specs()
    assert set(OVERRIDE_KEYS) == {"gpu", "fabric", "cpu", "nccl_algo", *specs}
    assert all(s.unit and s.help for s in specs.values())
    # Counts have a workload config's bounds; every rate, size and latency 1e9 of its unit.
    his = {k: s.hi for k, s in specs.items()}
    assert his.pop("gpus_per_node") == 1024 and his.pop("nodes") == 1_000_000
    assert set(his.values()) == {1e9}
    described = make_cluster("A100-SXM4-80GB").describe()
    defaults = ClusterKeys().flat()
    shared = set(described) & set(defaults)
    assert len(shared) == 6 and all(described[k] == defaults[k] for k in shared)
    # Checked values are converted into the cluster's units (bytes/s, s) or its GPU.
    c = make_cluster("A100").with_overrides({"net_latency_us": "2.5", "memory_gb": 40})
    assert c.net_latency_s == pytest.approx(2.5e-6) and c.gpu.memory_bytes == 40 * GB


@pytest.mark.parametrize(
    ("spec", "allowed"),
    [
        ("", None),
        ("ring", {"RING"}),
        ("Ring, Tree", {"RING", "TREE"}),
        ("^nvls", {"RING", "TREE"}),
        ("^NVLS,tree", {"RING"}),
    ],
)
def test_nccl_algo_reads_nccls_syntax(spec: str, allowed: set[str] | None) -> None:
    cluster = make_cluster("H100-SXM5-80GB", nccl_algo=spec)
    assert cluster.allowed_algorithms == (None if allowed is None else frozenset(allowed))
    assert cluster.describe()["nccl_algo"] == cluster.nccl_algo


@pytest.mark.parametrize(
    ("spec", "message"),
    [("collnet", "unknown or unmodelled"), ("^ring,tree,nvls", "no algorithm"), (3, "string")],
)
def test_a_bad_nccl_algo_is_a_config_error(spec: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        make_cluster("H100-SXM5-80GB", nccl_algo=spec)
    assert "cluster.nccl_algo" in info.value.one_line()


def test_a_config_number_written_as_a_string_is_refused() -> None:
    # nic_gbytes_per_s = "5" was read as 5 (and "1e-2" as 0.01): the config's values are typed.
    for value in ("5", True):
        config = ClusterConfig("H100", 8, 1, {"nic_gbytes_per_s": value})
        with pytest.raises(ConfigError, match="expected a number") as err:
            cluster_from_config(config, "job.toml")
        assert err.value.where == "cluster.nic_gbytes_per_s"
    assert cluster_from_config(ClusterConfig("H100", 8, 1, {"nic_gbytes_per_s": 5})).nodes == 1


def test_set_reads_a_quoted_string_as_toml_does() -> None:
    # --set cluster.gpu="A100" was an unknown preset '"A100"'.
    base = make_cluster("H100-SXM5-80GB")
    assert base.with_overrides({"gpu": '"A100"'}).gpu.name == "A100-SXM4-80GB"
    assert base.with_overrides({"nccl_algo": "'ring'"}).nccl_algo == "ring"
    assert base.with_overrides({"fabric": '"pcie"'}).fabric == "pcie"
