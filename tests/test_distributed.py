"""Multi-process training on JAX's distributed runtime: two local processes x 2 fake CPU devices, gloo collectives.

Each test starts its processes with ``subprocess`` on a free localhost port and bounds every wait: the processes get
``--init-timeout-s`` / ``--heartbeat-timeout-s``, and the test kills anything still running at its deadline.
"""

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import agents
from agents.ppo import PPOConfig
from rlpar import cli
from rlpar import train as train_cli
from rlpar.runner import RunConfig, run

REPO = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).with_name("distributed_worker.py")
# Global num_envs 8 over 4 devices; 4 updates in one compiled chunk (one compile per process).
CONFIG = PPOConfig(num_envs=8, num_steps=16, total_timesteps=8 * 16 * 4, num_minibatches=2, update_epochs=2,
                   hidden_sizes=(16, 16))
LOG_EVERY = 4
PROCESS_DEADLINE_S = 240  # per test: the longest a run of two processes may take before the test kills it


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        return sock.getsockname()[1]


def _config_flags(config) -> list[str]:
    """``config``'s fields as the CLI flags that rebuild it (the CLI generates one flag per field)."""
    flags = []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        name = cli.flag_name(f.name)
        if isinstance(value, bool):
            flags.append(name if value else "--no-" + name[2:])
        elif isinstance(value, tuple):
            flags += [name, ",".join(map(str, value))]
        else:
            flags += [name, str(value)]
    return flags


def _process_flags(port: int, process_id: int, heartbeat_timeout_s: int) -> list[str]:
    return ["--devices", "2", "--coordinator", f"localhost:{port}", "--num-processes", "2", "--process-id",
            str(process_id), "--init-timeout-s", "120", "--heartbeat-timeout-s", str(heartbeat_timeout_s)]


def _start(command: list[str], log_dir: Path, name: str) -> subprocess.Popen:
    """Start ``command`` from the repo root with its stdout and stderr in ``log_dir/name.{out,err}``."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)  # the flags choose the device count
    with open(log_dir / f"{name}.out", "w") as out, open(log_dir / f"{name}.err", "w") as err:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=err)


def _output(log_dir: Path, name: str) -> str:
    return (log_dir / f"{name}.out").read_text() + "\n--- stderr ---\n" + (log_dir / f"{name}.err").read_text()[-3000:]


def _wait_all(processes: dict[str, subprocess.Popen], log_dir: Path, deadline: float) -> None:
    """Wait for every process until ``deadline`` (``time.monotonic``); kill all of them and fail if one is late."""
    try:
        for proc in processes.values():
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        for proc in processes.values():
            proc.kill()
        pytest.fail("processes did not finish in time:\n" + "\n".join(
            f"== {name}\n{_output(log_dir, name)}" for name in processes))


def test_two_processes_equal_one_process_with_four_devices(tmp_path):
    port = _free_port()
    processes = {
        f"process{i}": _start(
            [sys.executable, str(WORKER), str(tmp_path / f"process{i}.npz"), "--env", "CartPole-v1",
             "--log-every", str(LOG_EVERY), "--run-dir", str(tmp_path / f"run{i}"),
             *_process_flags(port, i, heartbeat_timeout_s=30), *_config_flags(CONFIG)],
            tmp_path, f"process{i}")
        for i in range(2)
    }
    deadline = time.monotonic() + PROCESS_DEADLINE_S
    try:
        # The single-process reference on this test process's 4 devices, while the two processes run.
        reference = run(agents.get("ppo"), CONFIG, RunConfig(env="CartPole-v1", devices=4, log_every=LOG_EVERY))
    finally:
        _wait_all(processes, tmp_path, deadline)
    for name, proc in processes.items():
        assert proc.returncode == 0, f"{name} failed:\n{_output(tmp_path, name)}"

    outs = [np.load(tmp_path / f"process{i}.npz") for i in range(2)]
    for i, out in enumerate(outs):
        assert int(out["process_count"]) == 2 and int(out["process_index"]) == i
        assert int(out["global_devices"]) == 4 and int(out["local_devices"]) == 2
        assert bool(out["replicas_identical"]), f"process {i}: its two devices hold different params"
    names = sorted(n for n in outs[0].files if n.startswith("param:"))
    assert len(names) == len(jax.tree.leaves(reference.params))
    for name in names:
        np.testing.assert_array_equal(outs[0][name], outs[1][name], err_msg=f"{name} differs between processes")

    # The same global run as one process with 4 devices: same keys per global device, same global pmean.
    expected = {f"param:{jax.tree_util.keystr(path)}": leaf
                for path, leaf in jax.tree_util.tree_leaves_with_path(reference.params)}
    for name in names:
        np.testing.assert_allclose(outs[0][name], expected[name], atol=1e-5, rtol=0, err_msg=name)

    # Only process 0 writes the run's files.
    assert (tmp_path / "run0" / "config.json").exists()
    assert len((tmp_path / "run0" / "metrics.jsonl").read_text().splitlines()) == 1
    assert not (tmp_path / "run1").exists()


def test_a_killed_process_makes_the_other_exit_with_an_error(tmp_path):
    port = _free_port()
    long_run = CONFIG.replace(total_timesteps=10_000_000)  # would take hours: only the failure can end it
    command = lambda i: [sys.executable, "-m", "rlpar.train", "ppo", "--env", "CartPole-v1",
                         "--log-every", str(LOG_EVERY), *_process_flags(port, i, heartbeat_timeout_s=5),
                         *_config_flags(long_run)]
    processes = {f"process{i}": _start(command(i), tmp_path, f"process{i}") for i in range(2)}
    deadline = time.monotonic() + PROCESS_DEADLINE_S
    try:
        # Wait until both processes have joined (process 0 prints its first line after that), then kill process 1
        # without warning. Process 0 goes on compiling, then would wait forever in the first gradient all-reduce;
        # instead the coordination service notices process 1's missing heartbeats within --heartbeat-timeout-s and
        # ends process 0 with an error, wherever it is. A hang ends at the deadline and fails the test.
        # (Killing after the first logged update shows the same, after two more compilations' worth of waiting.)
        while "rlpar: ppo" not in (tmp_path / "process0.out").read_text():
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes.values()):
                pytest.fail("the run did not start:\n" + _output(tmp_path, "process0") + _output(tmp_path, "process1"))
            time.sleep(0.2)
        processes["process1"].send_signal(signal.SIGKILL)
        processes["process0"].wait(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        pytest.fail("process 0 kept running after process 1 died:\n" + _output(tmp_path, "process0"))
    finally:
        for proc in processes.values():
            proc.kill()
            proc.wait()
    assert processes["process0"].returncode != 0
    err = (tmp_path / "process0.err").read_text()
    assert "stopped sending heartbeats" in err and "another task died" in err, err[-3000:]
    # Only the primary process prints the run's lines.
    assert "rlpar: ppo on CartPole-v1, 4 cpu device(s) in 2 processes" in (tmp_path / "process0.out").read_text()
    printed_by_1 = (tmp_path / "process1.out").read_text()
    assert "rlpar:" not in printed_by_1 and "update " not in printed_by_1


def test_a_missing_process_is_an_error_within_the_init_timeout(tmp_path):
    port = _free_port()
    proc = _start([sys.executable, "-m", "rlpar.train", "ppo", "--devices", "2", "--coordinator", f"localhost:{port}",
                   "--num-processes", "2", "--process-id", "0", "--init-timeout-s", "2"], tmp_path, "alone")
    try:
        proc.wait(timeout=120)  # the process itself gives up after 2 s of waiting for process 1
    finally:
        proc.kill()
    assert proc.returncode != 0
    err = (tmp_path / "alone.err").read_text()
    assert f"rlpar: joining the multi-process run at localhost:{port} as process 0 of 2 (init timeout 2s" in err
    assert "DEADLINE_EXCEEDED" in err, err[-3000:]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--num-processes", "2"], "num_processes=2 needs --coordinator HOST:PORT (or auto)"),
        (["--coordinator", "localhost:1", "--num-processes", "2", "--process-id", "2"],
         "process_id=2: must be in 0..1 (num_processes=2)"),
        (["--num-processes", "0"], "num_processes=0: must be a positive integer"),
        (["--heartbeat-timeout-s", "0"], "heartbeat_timeout_s=0: must be a positive integer"),
    ],
)
def test_bad_multi_process_flags_are_clear_errors(argv, message, capsys):
    assert train_cli.main(["ppo", *argv]) == 2
    assert message in capsys.readouterr().err


def test_multi_process_flags_reach_the_run_config():
    import argparse

    parser = argparse.ArgumentParser()
    cli.add_dataclass_flags(parser, RunConfig, "run")
    args = parser.parse_args(["--coordinator", "10.0.0.1:1234", "--num-processes", "4", "--process-id", "3",
                              "--heartbeat-timeout-s", "20", "--init-timeout-s", "60"])
    config = cli.build_dataclass(RunConfig, args).validate()
    assert (config.coordinator, config.num_processes, config.process_id) == ("10.0.0.1:1234", 4, 3)
    assert (config.heartbeat_timeout_s, config.init_timeout_s) == (20, 60)
