"""``echo-view simulate CONFIG.toml|GRAPH.json`` and ``echo-view trace`` through the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from echo_view.cli import main
from tests.conftest import SAMPLES, TORCH_MISSING

VALIDATION = SAMPLES / "configs" / "validation"


def test_simulate_a_shipped_config_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", str(VALIDATION / "megatron-ci-7b-tp4-pp1.toml"), "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "echo-view.simulate-config/1"
    for key in (
        "step_time_s",
        "ranks_total",
        "ranks_simulated",
        "stages",
        "breakdown",
        "bubble",
        "reference_error_pct",
    ):
        assert key in out
    assert out["ranks_total"] == 8 and out["ranks_simulated"] == 1
    assert out["graph"]["origin"] == "beside"
    ref = out["reference"]["step_time_s"]
    assert out["reference_error_pct"] == pytest.approx(100 * (out["step_time_s"] / ref - 1))
    # By hand: N = 32 layers * (2*4096^2 + 2*4096*8*128 + 2*4096*16384) + 4096*131073
    # = 6,174,019,584; model FLOPs/token 6N + 12*32*32*128*8192 = 49,929,019,392; a step is
    # 8 sequences * 8192 tokens on 8 GPUs; H100 bf16 dense peak 989.4 TFLOP/s.
    t = out["throughput"]
    assert t["model_flops_per_token"] == 49_929_019_392 and t["tokens_per_step"] == 65_536
    per_gpu = 65_536 / out["step_time_s"] / 8
    assert t["tokens_per_s_per_gpu"] == pytest.approx(per_gpu)
    assert t["mfu"] == pytest.approx(per_gpu * 49_929_019_392 / 989.4e12)
    mem = out["memory"]
    assert mem["gpu_bytes"] == 84_943_110_144 and mem["fits"] and not mem["oom"]  # as CUDA reports
    assert len(mem["stages"]) == 1 and mem["peak_bytes"] == mem["stages"][0]["peak_bytes"]
    parts = ("weights", "grads", "optimizer", "activations", "transient")
    assert mem["peak_bytes"] == sum(mem["stages"][0][k] for k in parts)


def test_simulate_says_how_much_of_the_step_the_host_issues(
    capsys: pytest.CaptureFixture[str],
) -> None:
    small = SAMPLES / "configs" / "megatron-ci-small" / "tp1-pp2.toml"
    assert main(["simulate", str(small), "--json"]) == 0
    host = json.loads(capsys.readouterr().out)["host"]
    assert host["kernel_us"] == 73.7 and 0.5 < host["share"] <= 1.0
    assert main(["simulate", str(small)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("host path:"))
    assert f"{1e3 * host['busy_s']:,.1f} ms of kernel issue" in line
    assert line.endswith("host-bound: --set host.kernel_us=US for your host")
    # A GPU-bound step gets no hint; without a host path there is no line.
    assert main(["simulate", str(VALIDATION / "megatron-ci-7b-tp4-pp1.toml")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("host path:"))
    assert "host-bound" not in line
    assert main(["simulate", str(small), "--set", "host.kernel_us=0"]) == 0
    assert "host path:" not in capsys.readouterr().out


def _ci_7b_on(tmp_path: Path, gpu: str) -> Path:
    """The Megatron CI 7B tp4 config (and its traced graph beside it) on another GPU."""
    text = (VALIDATION / "megatron-ci-7b-tp4-pp1.toml").read_text()
    assert 'gpu = "H100-SXM5-80GB"' in text
    path = tmp_path / "ci7b.toml"
    path.write_text(text.replace('gpu = "H100-SXM5-80GB"', f'gpu = "{gpu}"'))
    graph = VALIDATION / "megatron-ci-7b-tp4-pp1.graph.json.gz"
    shutil.copy(graph, tmp_path / "ci7b.graph.json.gz")
    return path


def test_simulate_text_shows_memory_and_oom(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The same 7B model squeezed onto one 40 GB A100 per tensor-parallel rank runs out of memory.
    small = _ci_7b_on(tmp_path, "A100-SXM4-40GB")
    assert main(["simulate", str(small)]) == 0
    out = capsys.readouterr().out
    assert "memory: peak" in out and "OUT OF MEMORY" in out and "memory per stage (GB): 0:" in out


def test_simulate_writes_a_predicted_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pred.json"
    assert main(["simulate", str(VALIDATION / "megatron-ci-7b-tp1-pp4.toml"), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "predicted step time" in text and "error" in text
    assert main(["check", str(out)]) == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[model]\nkind='gpt'\n", "required table [parallel] is missing"),
        ("[model\n", "invalid TOML"),
        (
            "[model]\nkind='gpt'\nlayers=2\nhidden=64\nheads=4\nseq_len=16\nvocab=100\n"
            "[parallel]\ntp=1\npp=1\ndp=2\nfsdp='full_shard'\nfsdp_grad_sync='last_microbatch'\n"
            "[batch]\nglobal=2\nmicro=1\n"
            "[cluster]\ngpu='H100'\ngpus_per_node=2\nnodes=1\n[precision]\ndtype='bf16'\n",
            'parallel.fsdp_grad_sync: "last_microbatch" is modelled with pp > 1 only',
        ),
        (
            "[model]\nkind='gpt'\nlayers=7\nhidden=64\nheads=4\nseq_len=16\nvocab=100\n"
            "[parallel]\ntp=1\npp=2\ndp=1\nvirtual_stages=2\nfirst_stage_layers=3\n"
            "[batch]\nglobal=2\nmicro=1\n"
            "[cluster]\ngpu='H100'\ngpus_per_node=2\nnodes=1\n[precision]\ndtype='bf16'\n",
            "parallel.first_stage_layers: 3 layers do not split into virtual_stages = 2",
        ),
        # It blamed model.layers: "the -9223372036854775795 layers left after ...".
        (
            "[model]\nkind='gpt'\nlayers=12\nhidden=64\nheads=4\nseq_len=16\nvocab=100\n"
            "[parallel]\ntp=1\npp=2\ndp=1\nfirst_stage_layers=9223372036854775807\n"
            "[batch]\nglobal=2\nmicro=1\n"
            "[cluster]\ngpu='H100'\ngpus_per_node=2\nnodes=1\n[precision]\ndtype='bf16'\n",
            "parallel.first_stage_layers: 9,223,372,036,854,775,807 layers on one stage leave",
        ),
        # A refusal met only in simulation named no file.
        (
            "[model]\nkind='gpt'\nlayers=2\nhidden=64\nheads=4\nseq_len=16\nvocab=100\n"
            "[parallel]\ntp=2\npp=1\ndp=1\n[batch]\nglobal=2\nmicro=1\n"
            "[cluster]\ngpu='A100'\ngpus_per_node=2\nnodes=1\nnccl_algo='nvls'\n"
            "[precision]\ndtype='bf16'\n",
            "cluster.nccl_algo: NCCL_ALGO 'nvls' allows no algorithm",
        ),
    ],
)
def test_bad_configs_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and str(path) in err and "\n" not in err


def test_unknown_preset_lists_the_known_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _ci_7b_on(tmp_path, "Z9000")
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Z9000" in err and "H100" in err and "A100" in err


def test_unknown_set_key(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", str(VALIDATION / "megatron-ci-7b-tp4-pp1.toml"), "--set", "compute.foo=1"]
    assert main(args) == 2
    assert "compute.foo" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("knob", "message"),
    [
        ("compute.gemm_eff_max=0", "--set compute.gemm_eff_max: compute parameter"),
        ("host.kernel_us=1e15", "--set host.kernel_us: host parameter"),
    ],
)
def test_out_of_range_knobs_name_the_set_option(
    knob: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", str(VALIDATION / "megatron-ci-7b-tp4-pp1.toml"), "--set", knob]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"echo-view: error: {message}") and "\n" not in err


def test_trace_then_simulate_the_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason=TORCH_MISSING)
    graph = tmp_path / "g.json.gz"
    assert (
        main(["trace", str(VALIDATION / "korthikanti-22b-selective.toml"), "-o", str(graph)]) == 0
    )
    capsys.readouterr()
    assert main(["simulate", str(graph), "--json"]) == 0
    from_graph = json.loads(capsys.readouterr().out)
    assert main(["simulate", str(VALIDATION / "korthikanti-22b-selective.toml"), "--json"]) == 0
    from_config = json.loads(capsys.readouterr().out)
    assert from_graph["step_time_s"] == from_config["step_time_s"]


@pytest.mark.parametrize("extra", [["--ranks", "all"], ["--compute", "x.toml"]])
def test_config_only_options_are_refused_for_measured_jobs(
    extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", str(SAMPLES / "dlrm_kineto"), *extra]) == 2
    assert "applies to workload configs" in capsys.readouterr().err


def test_a_step_too_large_to_simulate_is_refused_before_its_costs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 10,000 layers with 8,192 micro-batches (4.4 G ops) was OOM-killed on 24 GB; the bound
    # (100 M) is lowered here so that a shipped config (7.3 M ops) meets it.
    import echo_view.sim.compose as compose

    monkeypatch.setattr(compose, "MAX_STEP_OPS", 1_000_000)
    config = SAMPLES / "configs" / "echo-gpt175b-96xH800.toml"
    assert main(["simulate", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"echo-view: error: {config}: one step would simulate about 7,305,216")
    assert "(4,756 a micro-batch over the stages, 1,536 micro-batches)" in err
    assert err.count("\n") == 1


def test_all_ranks_refuses_a_job_too_large_to_build(capsys: pytest.CaptureFixture[str]) -> None:
    config = SAMPLES / "configs" / "echo-gpt175b-96xH800.toml"
    assert main(["simulate", str(config), "--ranks", "all"]) == 2
    err = capsys.readouterr().err
    assert "--ranks all would simulate about" in err and "--ranks stages" in err


@pytest.mark.parametrize("value", ["-1", "nan", "fast"])
def test_bad_scale_values_are_one_line_errors(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = VALIDATION / "megatron-ci-7b-tp4-pp1.toml"
    assert main(["simulate", str(config), "--set", f"compute.scale.all={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "compute.scale.all" in err and "\n" not in err


@pytest.mark.parametrize(
    ("knob", "says"),
    [
        ("cluster.nodes=1", "1 node(s) of 8 GPUs hold fewer GPUs than the job's 64 ranks"),
        ("cluster.gpus_per_node=4", "8 node(s) of 4 GPUs hold fewer GPUs than the job's 64"),
    ],
)
def test_a_cluster_smaller_than_the_config_is_refused(
    knob: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Accepted: the 64-rank config's step was predicted "on 1 node" (a replay refused it).
    config = SAMPLES / "configs" / "echo-gpt13b-64xH800.toml"
    assert main(["simulate", str(config), "--set", knob]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def test_set_a_simulation_only_parallel_key_equals_editing_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--set parallel.overlap_param_gather=false`` predicts what the config with the key
    edited predicts, from the same graph (the key is simulation-only); a value the file could
    not hold is refused as the file's would be, naming --set."""
    src = VALIDATION / "megatron-ci-7b-tp4-pp1.toml"
    edited = tmp_path / src.name
    text = src.read_text()
    assert "overlap_param_gather = true" in text
    edited.write_text(text.replace("overlap_param_gather = true", "overlap_param_gather = false"))
    shutil.copy(src.with_name(src.stem + ".graph.json.gz"), tmp_path)

    def step(*args: str) -> float:
        assert main(["simulate", *args, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["graph"]["origin"] == "beside"
        return float(report["step_time_s"])

    knob = "parallel.overlap_param_gather=false"
    assert step(str(src), "--set", knob) == step(str(edited)) != step(str(src))
    assert main(["simulate", str(src), "--set", "parallel.overlap_param_gather=maybe"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--set: parallel.overlap_param_gather: expected bool" in err and "\n" not in err
    # Settings that change the traced graph stay in the file.
    assert main(["simulate", str(src), "--set", "parallel.fsdp=full_shard"]) == 2
    assert "'parallel.fsdp' is not a simulation knob" in capsys.readouterr().err


def test_a_step_that_takes_no_time_reports_no_throughput(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Every cost scaled to 0: a ZeroDivisionError traceback, exit 1.
    argv = ["simulate", str(VALIDATION / "megatron-ci-7b-tp4-pp1.toml")]
    argv += ["--set", "host.kernel_us=0", "--set", "compute.scale.all=0", "--set", "comm.scale=0"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["step_time_s"] == 0
    assert out["throughput"]["tokens_per_s_per_gpu"] is None and out["throughput"]["mfu"] is None
    assert main(argv) == 0
    assert "throughput: none to report: the predicted step takes no time" in capsys.readouterr().out


def test_an_mfu_over_100_percent_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    # Printed as it came ("MFU 2408.0%" for a script's one linear layer under a GPT shape).
    argv = ["simulate", str(VALIDATION / "megatron-ci-7b-tp4-pp1.toml")]
    argv += [
        "--set",
        "host.kernel_us=0",
        "--set",
        "compute.scale.all=0.01",
        "--set",
        "comm.scale=0",
    ]
    assert main(argv) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("throughput"))
    mfu = float(line.split("MFU ")[1].split("%")[0])
    assert mfu > 100
    assert line.endswith(
        "(over 100%: the config's [model] shape does not describe the traced model)"
    )


def test_one_stage_reports_no_pipeline_bubble(capsys: pytest.CaptureFixture[str]) -> None:
    # "pipeline bubble: ideal 0.0%, simulated 65.9%" at pp = 1: host-bound idle time, no bubble.
    assert main(["simulate", str(VALIDATION / "megatron-ci-7b-tp4-pp1.toml")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("pipeline"))
    assert line.startswith("pipeline bubble: none (one stage); the compute stream is idle ")
    assert main(["simulate", str(VALIDATION / "megatron-ci-7b-tp1-pp4.toml")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("pipeline"))
    assert line.startswith("pipeline bubble: ideal ")


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (SAMPLES / "dlrm_kineto", "--timeout applies to configs whose [model] names a script"),
        (
            SAMPLES / "configs" / "echo-gpt13b-64xH800.toml",
            "--timeout applies to configs whose [model] names a script",
        ),
        (SAMPLES / "scripts" / "llama3_8b_fsdp_8xh100.toml", "--timeout must be more than 0"),
    ],
)
def test_simulate_takes_a_timeout_for_script_configs_only(
    target: Path, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A config whose script hangs was stopped only by the 600 s default per rank.
    timeout = "0" if "must be" in message else "3"
    assert main(["simulate", str(target), "--timeout", timeout]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.slow
def test_simulate_stops_a_script_that_hangs_at_its_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("ECHO_VIEW_CACHE", str(tmp_path / "cache"))
    (tmp_path / "loop.py").write_text("def train_step():\n    while True:\n        pass\n")
    config = (SAMPLES / "scripts" / "llama3_8b_fsdp_8xh100.toml").read_text()
    script_line = next(x for x in config.splitlines() if x.startswith("script"))
    (tmp_path / "c.toml").write_text(config.replace(script_line, 'script = "loop.py"'))
    assert main(["simulate", str(tmp_path / "c.toml"), "--timeout", "1"]) == 2
    err = capsys.readouterr().err  # (line 2 or 3: where the alarm met the loop)
    assert "loop.py: line " in err and "train_step() did not return within 1 s" in err


def test_a_dtype_the_gpu_cannot_train_in_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # bf16 on V100 was timed at its FP16 rate while the MFU divided by its FP32 rate (326%);
    # fp8 on A100 or V100 ran at their FP16 rate, which no framework does.
    config = SAMPLES / "configs" / "megatron-ci-small" / "tp1-pp2.toml"
    assert main(["simulate", str(config), "--set", "cluster.gpu=V100"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "precision.dtype: V100-SXM2-32GB has no bf16 tensor cores" in err
    assert main(["plan", str(config), "--gpus", "8", "--gpu", "A100"]) == 0
    capsys.readouterr()
    assert main(["plan", str(config), "--gpus", "8", "--gpu", "V100"]) == 2
    assert "--gpu: V100-SXM2-32GB has no bf16 tensor cores" in capsys.readouterr().err


SMALL_SHAPE = """[model]
kind = "gpt"
layers = 12
hidden = 512
heads = 8
seq_len = {seq}
attention = "{attention}"
vocab = 50257
[parallel]
tp = 2
pp = 2
dp = 2
[batch]
global = {batch}
micro = {micro}
[cluster]
gpu = "H100-SXM5-80GB"
gpus_per_node = 8
nodes = 1
[precision]
dtype = "bf16"
"""


@pytest.mark.parametrize(
    ("attention", "seq", "micro", "message"),
    [
        # torch refused the unfused scores' 16,384 x 16,777,216^2 elements: a traceback.
        ("unfused", 16_777_216, 4_096, "model.seq_len: a tensor of the model would need more"),
        # Kernel times past int64 wrapped negative: a ValueError traceback from the workload.
        ("flash", 134_217_728, 65_536, "the op durations (with their scale factors) add up to"),
    ],
)
def test_sizes_no_gpu_holds_are_one_line_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    attention: str,
    seq: int,
    micro: int,
    message: str,
) -> None:
    pytest.importorskip("torch", reason=TORCH_MISSING)
    path = tmp_path / "huge.toml"
    text = SMALL_SHAPE.format(attention=attention, seq=seq, micro=micro, batch=2 * micro)
    path.write_text(text)
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and str(path) in err
