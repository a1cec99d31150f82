"""What a user sees on bad input, Ctrl-C, --help and resume: one-line errors (exit 2, no traceback) naming the value
and what is accepted; the preset's values in --help; resumable interruptions."""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlpar.tools import evaluate
from rlpar.tools import train as train_cli
from tests.helpers import sigint_as_in_a_terminal

REPO = Path(__file__).resolve().parents[1]


def _without(monkeypatch, *packages):
    """Make ``packages`` look uninstalled to ``importlib.util.find_spec`` (how rlpar checks for its extras)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in packages else real(name, *a))


@pytest.mark.parametrize(
    "argv, missing, message",
    [
        (["ppo", "--tensorboard", "--run-dir", "RUN"], ("tensorboardX",),
         "--tensorboard needs the tensorboardX package: pip install -e \".[extras]\""),
        (["ppo", "--wandb", "--run-dir", "RUN"], ("wandb",),
         "--wandb needs the wandb package: pip install -e \".[wandb]\""),
        (["ppo", "--wandb"], (), "--wandb needs --run-dir DIR"),
        (["ppo", "--run-dir", "FILE"], (), "is a file, not a directory: give a directory path"),
        (["ppo", "--env", "MNISTBandit-bsuite"], (), "env 'MNISTBandit-bsuite' is not supported: it downloads"),
        (["ppo", "--devices", "99"], (), "devices=99: at most 8 CPU devices on this host"),
        (["ppo", "--sweep", "hidden_sizes=8,16"], (), "sweep='hidden_sizes=8,16': expected FIELD=V1,V2,... with FIELD "
                                                      "one of lr, gamma"),
        (["examples.nothing:SPEC"], (), "agent 'examples.nothing:SPEC': cannot import module 'examples.nothing'"),
    ],
    ids=["tensorboard-missing", "wandb-missing", "wandb-without-run-dir", "run-dir-is-a-file", "needs-download", "too-many-devices", "unsweepable-field",
         "bad-agent-module"],
)
def test_train_bad_input_is_one_line_without_traceback(argv, missing, message, tmp_path, monkeypatch, capsys):
    _without(monkeypatch, *missing)
    (tmp_path / "FILE").write_text("not a directory")
    argv = [str(tmp_path / a) if a in ("RUN", "FILE") else a for a in argv]
    assert train_cli.main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err + captured.out
    assert len(captured.err.strip().splitlines()) == 1


def test_a_bad_plain_layers_setting_is_refused_before_compiling(monkeypatch, capsys):
    monkeypatch.setenv("RLPAR_PLAIN_LAYERS", "maybe")
    monkeypatch.setattr(train_cli, "_train", lambda *a: pytest.fail("reached training"))
    assert train_cli.main(["ppo", "--env", "CartPole-v1"]) == 2
    captured = capsys.readouterr()
    assert "RLPAR_PLAIN_LAYERS='maybe': expected one of 1/0, true/false" in captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "compiling" not in captured.out


@pytest.mark.parametrize(
    "gif, missing, message",
    [
        ("NODIR/episode.gif", (), "the directory"),
        ("episode.gif", ("pygame",), "--gif needs pygame: pip install -e \".[extras]\""),
    ],
    ids=["directory-missing", "pygame-missing"],
)
def test_evaluate_gif_bad_input_is_refused_before_the_episodes(tiny_run_dir, tmp_path, monkeypatch, capsys, gif,
                                                                 missing, message):
    _without(monkeypatch, *missing)
    ran = []
    monkeypatch.setattr(evaluate, "evaluate", lambda *a, **k: ran.append(a))
    assert evaluate.main([str(tiny_run_dir), "--gif", str(tmp_path / gif)]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err and not ran


def test_evaluate_gif_of_an_env_without_renderer_is_refused_before_the_episodes(tiny_run_dir, tmp_path, monkeypatch,
                                                                                capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run_dir)
    meta = json.loads((run_dir / "config.json").read_text())
    meta["run"]["env"] = "Probe-OneStep-v0"
    (run_dir / "config.json").write_text(json.dumps(meta))
    ran = []
    monkeypatch.setattr(evaluate, "evaluate", lambda *a, **k: ran.append(a))
    assert evaluate.main([str(run_dir), "--gif", str(tmp_path / "x.gif")]) == 2
    assert "gymnax's visualizer cannot draw 'Probe-OneStep-v0'" in capsys.readouterr().err and not ran


def test_help_shows_the_env_preset_as_defaults(capsys):
    with pytest.raises(SystemExit):
        train_cli.main(["ppo", "--env", "Pendulum-v1", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--gamma FLOAT discount factor per step (default: 0.9)" in out  # the preset's, not 0.99
    assert "(default: 0.001)" in out  # lr 1e-3 from the preset


def test_console_script_usage_names_itself():
    script = Path(sys.executable).with_name("rlpar-train")
    if not script.exists():
        pytest.skip("rlpar-train is not installed in this environment (pip install -e .)")
    proc = subprocess.run([str(script), "ppo", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: rlpar-train ppo")


@pytest.mark.slow  # trains, is interrupted and resumes in subprocesses (about a minute); CI runs it (-m slow)
def test_ctrl_c_prints_one_line_exits_130_and_leaves_the_run_resumable(tmp_path):
    # SIGINT a run once its first checkpoint exists; it must name the update, the last checkpoint and how to
    # continue, exit 130, and resuming must finish the run. Many short updates, so that the run is still going when
    # the signal comes; few checkpoints, each a write of its own.
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    argv = ["ppo", "--env", "CartPole-v1", "--num-envs", "4", "--num-steps", "8", "--hidden-sizes", "16,16",
            "--total-timesteps", str(4 * 8 * 4000), "--log-every", "100", "--checkpoint-every", "500",
            "--eval-every", "0", "--run-dir", "runs/x"]
    proc = subprocess.Popen([sys.executable, "-m", "rlpar.train", *argv], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_in_a_terminal)  # as in a terminal, whatever started the tests
    deadline = time.monotonic() + 240
    while not list((tmp_path / "runs/x/checkpoints").glob("*/rlpar_commit.json")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("interrupted")]
    assert len(lines) == 1 and "last checkpoint: update " in lines[0]
    assert lines[0].endswith("continue with: python -m rlpar.train --resume runs/x")
    resumed = subprocess.run([sys.executable, "-m", "rlpar.train", "--resume", "runs/x"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from update " in resumed.stdout and "done:" in resumed.stdout
    finished = subprocess.run([sys.executable, "-m", "rlpar.train", "--resume", "runs/x"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0 and "the run is finished (update 4000 of 4000" in finished.stdout


@pytest.mark.parametrize("xla_message, said", [
    ("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (21.33G) exceeds "
     "available HBM (15.75G).", "it asked for 21.33G of temporaries where the device has 15.75G"),
    ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 13421772800 bytes.",
     "an allocation of 12,800 MiB failed"),
])
def test_a_program_too_large_for_the_device_is_one_line_naming_the_envs_and_the_memory(xla_message, said, monkeypatch,
                                                                                      capsys, tmp_path):
    """XLA's out-of-memory error (what a TPU raises when the compiled program cannot fit, as PPO on Breakout-MinAtar
    at 65536 envs on a 15.7 GiB chip) becomes one line naming the env count and the memory asked for."""
    import jax

    def too_large(*args, **kwargs):
        raise jax.errors.JaxRuntimeError(xla_message)

    monkeypatch.setattr(train_cli, "_run_with_progress", too_large)
    code = train_cli.main(["ppo", "--env", "CartPole-v1", "--num-envs", "64", "--devices", "2",
                           "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("error: 64 envs x 128 steps (32 envs per device) does not fit the device's memory: ")
    assert said in err and "lower --num-envs or --num-steps" in err
