"""``echo-view trace`` on inputs that are no workload config: one line saying it wants a .toml."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from echo_view.cli import main
from tests.conftest import SAMPLES

WANTS = "a workload config (.toml); examples in samples/configs/, the format in docs/workloads.md"


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("configs", f"is a directory, not a file (give {WANTS})"),
        ("dlrm_kineto", f"is a directory, not a file (give {WANTS})"),
        ("README.md", f"not a workload config: text (expected {WANTS})"),
    ],
)
def test_trace_wants_a_toml(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, error: str
) -> None:
    out = tmp_path / "graph.json.gz"
    assert main(["trace", str(SAMPLES / name), "-o", str(out)]) == 2
    assert capsys.readouterr().err == f"echo-view: error: {SAMPLES / name}: {error}\n"
    assert not out.exists()


# -- trace --script: a bad step is one line naming the script and its line, exit 2 ----------

STEP = """\
import torch
import torch.distributed as dist
from torch import nn


def train_step():
    model = nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters())
    {body}
    opt.step()
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "line", "message", "extra"),
    [
        (
            "raise ValueError('bad shape')",
            9,
            "train_step() raised ValueError: bad shape (fix the script; --debug shows the "
            "traceback)",
            [],
        ),
        (
            "model(torch.ones(2, 64, device='cuda')).sum().backward()",
            9,
            "train_step() raised FakeTensorDeviceMismatchError: Expected all tensors to be on "
            "the same device",
            [],
        ),
        (
            "model(torch.ones(2, 64)).sum().backward(); print(model.weight.sum().item())",
            9,
            "train_step() raised DataDependentOutputException: aten._local_scalar_dense.default "
            "(fake tensors hold no values",
            [],
        ),
        (
            "model(torch.ones(2, 64)); dist.recv(torch.ones(2))",
            9,
            "unsupported collective c10d::recv_any_source_",
            [],
        ),
        ("while True: pass", 9, "train_step() did not return within 1 s", ["--timeout", "1"]),
        (
            "model(torch.ones(2, 64)).sum().backward(); model(torch.ones(2, 64))",
            9,
            "a second forward pass after the backward pass",
            [],
        ),
        # (no hint said what the function must run)
        (
            "pass",
            10,
            "an optimizer step before any backward pass (the function runs one training "
            "micro-batch: the model's forward, the loss's backward, then optimizer.step()",
            [],
        ),
        ("import sys; sys.exit(3)", 9, "train_step() called sys.exit(3) (the step", []),
        # Exceptions outside Exception's tree were a RuntimeError traceback with the message
        # raw (an escape sequence reached the terminal).
        ("raise KeyboardInterrupt", 9, "train_step() raised KeyboardInterrupt (fix", []),
        (
            "raise type('Stop', (BaseException,), {})('\\x1b[31mred')",
            9,
            "train_step() raised Stop: \\x1b[31mred (fix",
            [],
        ),
    ],
    ids=[
        "raises",
        "cuda",
        "item",
        "collective",
        "timeout",
        "accumulation",
        "no-backward",
        "exit",
        "interrupt",
        "base-exception",
    ],
)
def test_trace_script_errors_are_one_line_with_the_script_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    body: str,
    line: int,
    message: str,
    extra: list[str],
) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "step.py"
    script.write_text(STEP.format(body=body))
    out = tmp_path / "graph.json.gz"
    argv = ["trace", "--script", str(script), "--world", "1", "-o", str(out), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"echo-view: error: {script}: line {line}: {message}")
    if "device" in message:
        assert "choose the device with torch.cuda.is_available()" in err
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "import no_such_module_here\n",
            "line 1: importing the script raised ModuleNotFoundError: No module named "
            "'no_such_module_here' (install it in echo-view's environment)",
        ),
        ("x = 1\nraise KeyError('top')\n", "line 2: importing the script raised KeyError: 'top'"),
        ("import sys\nsys.exit(2)\n", "line 2: the script called sys.exit(2) when imported"),
        (
            "import os\ndef train_step():\n    os._exit(0)\n",
            "the script ended rank 0's process (exit code 0) before train_step() returned",
        ),
        (
            "class Stop(BaseException):\n    pass\nraise Stop('x')\n",
            "line 3: importing the script raised Stop: x",
        ),
        # --timeout bounded the step only: a loop at the top level ran for the limit plus
        # the 120 s allowed for starting the process.
        (
            "while True:\n    pass\n",
            "line 1: importing the script did not finish within 1 s",
        ),
    ],
    ids=["import", "raises", "exit", "os-exit", "base-exception", "loop"],
)
def test_trace_script_that_fails_outside_its_step_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, message: str
) -> None:
    # Each was a RuntimeError traceback from the traced rank's process.
    pytest.importorskip("torch")
    script = tmp_path / "step.py"
    script.write_text(text)
    out = tmp_path / "graph.json.gz"
    argv = ["trace", "--script", str(script), "--world", "1", "-o", str(out), "--timeout", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"echo-view: error: {script}: {message}") and err.count("\n") == 1
    assert not out.exists()


def test_trace_script_needs_world_and_one_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "graph.json.gz"
    script = tmp_path / "step.py"
    script.write_text("def train_step():\n    pass\n")
    assert main(["trace", "--script", str(script), "-o", str(out)]) == 2
    assert "--script needs --world N" in capsys.readouterr().err
    assert main(["trace", "-o", str(out)]) == 2
    assert "give either CONFIG.toml or --script" in capsys.readouterr().err


def test_a_timeout_of_0_is_refused_in_words_that_exclude_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = SAMPLES / "configs" / "megatron-ci-small" / "tp1-pp2.toml"
    argv = ["trace", "-o", str(tmp_path / "g.json.gz"), "--timeout", "0", str(config)]
    assert main(argv) == 2
    # It said "between 0 and 86400 s, got 0.0".
    assert "--timeout must be more than 0 and at most 86400 s, got 0\n" in capsys.readouterr().err


@pytest.mark.slow
def test_what_a_traced_script_prints_reaches_the_terminal_escaped(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A script's own prints went to the terminal raw: "\x1b[2J" cleared the screen. They go to
    # stderr (the command's output is stdout's).
    pytest.importorskip("torch")
    script = tmp_path / "step.py"
    script.write_text(
        "import sys\nprint('top\\x1b[2J')\ndef train_step():\n"
        "    print('a\\x1b]0;title\\x07b')\n    sys.stderr.write('e\\x1b[31m\\n')\n"
        "    raise ValueError('stop')\n"
    )
    out = tmp_path / "graph.json.gz"
    assert main(["trace", "--script", str(script), "--world", "1", "-o", str(out)]) == 2
    seen = capfd.readouterr()
    assert "\x1b" not in seen.out + seen.err and "\x07" not in seen.out
    assert "top\\x1b[2J\n" in seen.err and "a\\x1b]0;title\\x07b\n" in seen.err
    assert "e\\x1b[31m\n" in seen.err and not seen.out


def test_a_graph_takes_an_uppercase_extension(tmp_path: Path) -> None:
    # .JSON.GZ was refused (and a .GZ graph would have been written as plain text).
    pytest.importorskip("torch")
    out = tmp_path / "G.JSON.GZ"
    config = SAMPLES / "configs" / "megatron-ci-small" / "tp1-pp2.toml"
    assert main(["trace", str(config), "-o", str(out)]) == 0
    assert out.read_bytes()[:2] == b"\x1f\x8b"


def test_options_a_config_does_not_use_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Both were accepted and did nothing: a built-in model's trace has no time limit, and a
    # config's collectives are always timed by the model.
    config = str(SAMPLES / "configs" / "megatron-ci-small" / "tp1-pp2.toml")
    out = tmp_path / "g.json.gz"
    assert main(["trace", config, "-o", str(out), "--timeout", "5"]) == 2
    assert "--timeout limits a traced script" in capsys.readouterr().err
    assert main(["simulate", config, "--comm", "measured"]) == 2
    assert "--comm applies to a measured job" in capsys.readouterr().err
    assert not out.exists()


def test_script_arguments_are_checked_before_torch_is_imported(tmp_path: Path) -> None:
    # A missing script or --world 0 was reported only after importing torch (3-6 s).
    import subprocess
    import sys

    code = (
        "import sys; from echo_view.cli import main; "
        f"rc = [main(['trace', '--script', {str(tmp_path / 'gone.py')!r}, '--world', w, "
        f"'-o', {str(tmp_path / 'g.json')!r}]) for w in ('2', '0')]; "
        "print(rc, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[2, 2] False"
    assert "gone.py: no such script" in done.stderr and "--script needs --world N" in done.stderr


def test_the_command_waits_the_limit_and_a_grace_once_the_step_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The parent waited the limit plus the 120 s start allowance for the result: a step that
    # ignores or catches its alarm ran 2 minutes past --timeout 5.
    from echo_view.errors import InputError
    from echo_view.tracing import script_run

    waits: list[float] = []

    class Recv:
        def __init__(self) -> None:
            self.messages = [("started",)]

        def poll(self, timeout: float) -> bool:
            waits.append(timeout)
            return bool(self.messages)

        def recv(self) -> tuple[str]:
            return self.messages.pop()

        def close(self) -> None:
            pass

    class Proc:
        pid = -1  # (killpg(-1) is refused: stop_rank goes on)

        def is_alive(self) -> bool:
            return False

        def join(self) -> None:
            pass

    monkeypatch.setattr(script_run.os, "killpg", lambda pid, sig: None)
    spec = script_run.ScriptSpec(Path("step.py"))
    job = script_run.RankJob(spec, 0, 5.0, Proc(), Recv(), started=script_run.time.monotonic())
    with pytest.raises(InputError, match="did not return within 5 s"):
        script_run.finish_rank(job, script_run.StringTable())
    assert len(waits) == 2
    assert waits[0] <= script_run._START_S
    assert 5.0 < waits[1] <= 5.0 + script_run._GRACE_S


@pytest.mark.slow
def test_what_a_step_forks_ends_with_it(tmp_path: Path) -> None:
    # A forked child and a subprocess of the step outlived the command.
    pytest.importorskip("torch")
    pids = tmp_path / "pids.txt"
    script = tmp_path / "forks.py"
    script.write_text(
        STEP.format(
            body=f"import os, subprocess, time; child = os.fork()\n"
            f"    if child == 0: time.sleep(300); os._exit(0)\n"
            f"    sleeper = subprocess.Popen(['sleep', '301'])\n"
            f"    open({str(pids)!r}, 'a').write(f'{{child}} {{sleeper.pid}}\\n')\n"
            f"    model(torch.ones(2, 64)).sum().backward()"
        )
    )
    argv = ["trace", "--script", str(script), "--world", "1", "-o", str(tmp_path / "g.json")]
    assert main(argv) == 0
    left = [int(p) for p in pids.read_text().split()]
    assert len(left) == 2
    for pid in left:
        for _ in range(100):  # a killed process is gone, or a zombie, once the kill lands
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                break
            if state in ("Z", "X"):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"process {pid} the step started still runs")


@pytest.mark.slow
def test_a_script_imports_the_modules_beside_it(tmp_path: Path) -> None:
    # As `python train.py` or torchrun would; it was "No module named 'mylib' (install it in
    # echo-view's environment)".
    pytest.importorskip("torch")
    (tmp_path / "mylib.py").write_text("WIDTH = 64\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import mylib\n" + STEP.format(body="model(torch.ones(2, mylib.WIDTH)).sum().backward()")
    )
    argv = ["trace", "--script", str(script), "--world", "1", "-o", str(tmp_path / "g.json")]
    assert main(argv) == 0


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("train_step = max\n", "train_step is not a Python function that runs a training step"),
        (
            "class E(Exception):\n    def __str__(self):\n        raise RuntimeError('\\x1b[2J')\n"
            "def train_step():\n    raise E()\n",
            "line 5: train_step() raised E: (its message cannot be shown)",
        ),
        # A RuntimeWarning "coroutine ... was never awaited", then an optimizer-step error.
        ("async def train_step():\n    pass\n", "train_step() is asynchronous (async def)"),
    ],
    ids=["builtin", "unprintable-exception", "async"],
)
def test_steps_that_cannot_be_called_or_described_are_one_line(
    tmp_path: Path, source: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Both were a RuntimeError / ValueError traceback, exit 1 (the second with a raw escape).
    pytest.importorskip("torch")
    script = tmp_path / "step.py"
    script.write_text(source)
    argv = ["trace", "--script", str(script), "--world", "1", "-o", str(tmp_path / "g.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "\x1b" not in err


@pytest.mark.slow
def test_what_a_traced_script_prints_stays_off_stdout(tmp_path: Path) -> None:
    """A config's script printing (Python's print and its file descriptor 1) while it was
    traced wrote into ``simulate --json``'s stdout, which no longer parsed as JSON."""
    import json
    import os
    import subprocess
    import sys

    pytest.importorskip("torch")
    script = tmp_path / "step.py"
    script.write_text(
        STEP.format(body="model(torch.ones(2, 64)).sum().backward()").replace(
            "def train_step():\n",
            "def train_step():\n    print('hello'); __import__('os').write(1, b'raw\\n')\n",
        )
    )
    config = tmp_path / "c.toml"
    config.write_text(
        '[model]\nscript = "step.py"\nlayers = 1\nhidden = 64\nheads = 1\nseq_len = 2\n'
        "vocab = 64\n[parallel]\ntp = 1\npp = 1\ndp = 1\n[batch]\nglobal = 2\nmicro = 2\n"
        '[cluster]\ngpu = "H100"\ngpus_per_node = 1\nnodes = 1\n[precision]\ndtype = "fp32"\n'
    )
    env = {**os.environ, "ECHO_VIEW_CACHE": str(tmp_path / "cache")}
    argv = [sys.executable, "-m", "echo_view", "simulate", str(config), "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["step_time_s"] > 0
    assert "hello" in proc.stderr and "raw" in proc.stderr
