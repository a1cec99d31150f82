"""Multi-process training on JAX's distributed runtime: two local processes x 2 fake CPU devices, gloo collectives.

Each test starts its processes with ``subprocess`` on a free localhost port and bounds every wait: the processes get
``--init-timeout-s`` / ``--heartbeat-timeout-s``, and the test kills anything still running at its deadline.
"""

import dataclasses
import json
import os
import signal
import socket
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import agents
import agents.team
from agents.ppo import PPOConfig
from agents.team import TeamConfig
from rlpar.core import parallel
from rlpar.run import checkpoint, rundir
from rlpar.run.runner import RunConfig, run
from rlpar.tools import cli
from rlpar.tools import train as train_cli

REPO = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).with_name("distributed_worker.py")
SIGKILL_AFTER = Path(__file__).with_name("sigkill_after.py")
# Global num_envs 8 over 4 devices; 4 updates in one compiled chunk (one compile per process).
CONFIG = PPOConfig(num_envs=8, num_steps=16, total_timesteps=8 * 16 * 4, num_minibatches=2, update_epochs=2,
                   hidden_sizes=(16, 16))
LOG_EVERY = 4
PROCESS_DEADLINE_S = 240  # per test: the longest a run of two processes may take before the test kills it


# Compiling Craftax/brax steps and launching processes take minutes on 2 cores: run by `-m slow` (CI runs it).
pytestmark = pytest.mark.slow


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


def _start(command: list[str], log_dir: Path, name: str, extra_env: dict | None = None) -> subprocess.Popen:
    """Start ``command`` from the repo root with its stdout and stderr in ``log_dir/name.{out,err}``."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", JAX_PLATFORMS="cpu", **(extra_env or {}))
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


def _two_workers_beside_a_reference(tmp_path, worker_flags: list[str], reference):
    """``tests/distributed_worker.py`` as 2 processes of 2 devices each (one run dir, ``tmp_path / "run"``) with
    ``worker_flags``; while they run, ``reference()`` (the same run as one process on this test process's 4
    devices). Fails with their output if a process fails; returns ``(the processes' .npz files, reference())``."""
    port = _free_port()
    processes = {
        f"process{i}": _start(
            [sys.executable, str(WORKER), str(tmp_path / f"process{i}.npz"), *worker_flags,
             "--log-every", str(LOG_EVERY), "--run-dir", str(tmp_path / "run"),
             *_process_flags(port, i, heartbeat_timeout_s=30)],
            tmp_path, f"process{i}")
        for i in range(2)
    }
    deadline = time.monotonic() + PROCESS_DEADLINE_S
    try:
        expected = reference()
    finally:
        _wait_all(processes, tmp_path, deadline)
    for name, proc in processes.items():
        assert proc.returncode == 0, f"{name} failed:\n{_output(tmp_path, name)}"
    return [np.load(tmp_path / f"process{i}.npz") for i in range(2)], expected


def test_two_processes_equal_one_process_with_four_devices(tmp_path):
    outs, reference = _two_workers_beside_a_reference(
        tmp_path, ["--env", "CartPole-v1", *_config_flags(CONFIG)],
        lambda: run(agents.ppo.SPEC, CONFIG, RunConfig(env="CartPole-v1", devices=4, log_every=LOG_EVERY)))
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

    # Both processes were given one run dir: process 0 wrote the logs and the final checkpoint into it.
    assert len((tmp_path / "run" / rundir.METRICS).read_text().splitlines()) == 1
    assert checkpoint.Checkpoints(tmp_path / "run" / rundir.CHECKPOINTS).committed_steps() == [4]


# ippo on the team probe (pure JAX: no jaxmarl, a quick compile); agent ids as input, so the shared network's
# output differs per agent and its parameters move from their initialisation on a constant observation.
TEAM_CONFIG = TeamConfig(num_envs=8, num_steps=16, total_timesteps=8 * 16 * 4, num_minibatches=2, update_epochs=2,
                         hidden_sizes=(16, 16), agent_id=True)
TEAM_ENV = "envs.team_probes:Coordinate"


def test_two_processes_train_a_team_as_one_process_with_four_devices(tmp_path):
    # The agent axis rides along everything the single-agent run above checks: the same parameters on every device
    # of every process, and the same as one process with the same 4 global devices.
    outs, reference = _two_workers_beside_a_reference(
        tmp_path, ["--agent", "ippo", "--env", TEAM_ENV, *_config_flags(TEAM_CONFIG)],
        lambda: run(agents.team.IPPO_SPEC, TEAM_CONFIG, RunConfig(env=TEAM_ENV, devices=4, log_every=LOG_EVERY)))
    for i, out in enumerate(outs):
        assert int(out["process_count"]) == 2 and int(out["global_devices"]) == 4
        assert bool(out["replicas_identical"]), f"process {i}: its two devices hold different params"
    expected = {f"param:{jax.tree_util.keystr(path)}": leaf
                for path, leaf in jax.tree_util.tree_leaves_with_path(reference.params)}
    names = sorted(n for n in outs[0].files if n.startswith("param:"))
    assert names == sorted(expected)
    for name in names:
        np.testing.assert_array_equal(outs[0][name], outs[1][name], err_msg=f"{name} differs between processes")
        np.testing.assert_allclose(outs[0][name], expected[name], atol=1e-5, rtol=0, err_msg=name)
    biases = [name for name in names if "bias" in name]  # initialised to zero: nonzero once trained
    assert biases and any(np.any(outs[0][name] != 0) for name in biases), "the parameters never moved"
    # process 0 logged the team's episodes: 2 agents, 1 step each, so a team return of at most 2
    record = json.loads((tmp_path / "run" / rundir.METRICS).read_text().splitlines()[-1])
    assert record["episodes"] > 0 and 0.0 <= record["episode_return"] <= 2.0


def test_a_run_dir_that_not_every_process_sees_is_refused_before_compiling(tmp_path):
    # Two run dirs stand for a path on process 0's local disk: process 1 could never read its checkpoints back.
    port = _free_port()
    processes = {
        f"process{i}": _start([sys.executable, "-m", "rlpar.train", "ppo", "--env", "CartPole-v1", "--run-dir",
                               str(tmp_path / f"run{i}"), *_process_flags(port, i, heartbeat_timeout_s=30),
                               *_config_flags(CONFIG)], tmp_path, f"process{i}")
        for i in range(2)
    }
    _wait_all(processes, tmp_path, time.monotonic() + PROCESS_DEADLINE_S)
    for i, proc in enumerate(processes.values()):
        err = (tmp_path / f"process{i}.err").read_text()
        assert proc.returncode == 2, err[-3000:]
        assert f"error: process(es) 1 cannot see {tmp_path / f'run{i}' / rundir.CONFIG}, which process 0 wrote" in err
    assert not (tmp_path / "run0" / rundir.CHECKPOINTS).exists()


def _assert_states_close(actual, expected, what: str) -> None:
    """Float leaves within 1e-5 (two processes' gloo all-reduce may add in another order), all others equal."""
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(actual), jax.tree.leaves(expected)):
        name = f"{what}: {jax.tree_util.keystr(path)}"
        if np.issubdtype(np.asarray(b).dtype, np.floating):
            np.testing.assert_allclose(a, b, atol=1e-5, rtol=0, err_msg=name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)


def test_two_processes_checkpoint_through_process_0_and_resume_together(tmp_path):
    # One run dir for both processes, as a cluster's shared filesystem gives them. Two chunks of 2 updates, a
    # checkpoint after each; both processes SIGKILL themselves after update 4's metrics line, before its checkpoint.
    run_dir = tmp_path / "run"
    flags = ["--env", "CartPole-v1", "--log-every", "2", "--checkpoint-every", "2", "--eval-every", "0",
             "--run-dir", str(run_dir), *_config_flags(CONFIG)]
    port = _free_port()
    killed = {f"first{i}": _start([sys.executable, str(SIGKILL_AFTER), "4", "ppo", *flags,
                                   *_process_flags(port, i, heartbeat_timeout_s=30)],
                                  tmp_path, f"first{i}", extra_env={"PYTHONPATH": str(REPO)})
              for i in range(2)}
    try:
        # The uninterrupted single-process run with the same global devices, seed and num_envs.
        reference = run(agents.ppo.SPEC, CONFIG, RunConfig(env="CartPole-v1", devices=4, log_every=2, eval_every=0))
    finally:
        _wait_all(killed, tmp_path, time.monotonic() + PROCESS_DEADLINE_S)
    for name, proc in killed.items():
        assert proc.returncode == -signal.SIGKILL, f"{name}:\n{_output(tmp_path, name)}"
    checkpoints = checkpoint.Checkpoints(run_dir / rundir.CHECKPOINTS)
    assert checkpoints.committed_steps() == [2]
    assert len((run_dir / rundir.METRICS).read_text().splitlines()) == 2  # one line beyond the checkpoint
    # orbax keeps each process's array data apart (ocdbt.process_N): only process 0's exists.
    written = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*"))
    assert any("ocdbt.process_0" in p for p in written) and not any("process_1" in p for p in written), written

    # Resume: both processes with a new coordinator (a new cluster job), and, from a copy of the same run dir, this
    # test process alone with 4 devices: a checkpoint holds every device's rows, whoever wrote them.
    alone_dir = tmp_path / "alone"
    shutil.copytree(run_dir, alone_dir)
    port = _free_port()
    resumed = {f"resumed{i}": _start([sys.executable, "-m", "rlpar.train", "--resume", str(run_dir),
                                      *_process_flags(port, i, heartbeat_timeout_s=30)[2:]], tmp_path, f"resumed{i}")
               for i in range(2)}
    try:
        alone = run(agents.ppo.SPEC, CONFIG, RunConfig(env="CartPole-v1", devices=4, log_every=2, checkpoint_every=2,
                                                         eval_every=0, run_dir=str(alone_dir)), resume=True)
    finally:
        _wait_all(resumed, tmp_path, time.monotonic() + PROCESS_DEADLINE_S)
    for name, proc in resumed.items():
        assert proc.returncode == 0, f"{name} failed:\n{_output(tmp_path, name)}"
    assert "rlpar: ppo on CartPole-v1, 4 cpu device(s) in 2 processes" in (tmp_path / "resumed0.out").read_text()
    assert "rlpar:" not in (tmp_path / "resumed1.out").read_text()

    assert checkpoints.committed_steps() == [2, 4]
    records = [json.loads(line) for line in (run_dir / rundir.METRICS).read_text().splitlines()]
    assert [r["update"] for r in records] == [2, 4]
    expected = parallel.rows_to_host(reference.state)
    final = checkpoints.restore(4, template=expected).state
    _assert_states_close(final, expected, "2 processes, resumed")
    _assert_states_close(parallel.rows_to_host(alone.state), expected, "1 process, resumed")
    for got, want in zip(records, reference.metrics):
        assert got["update"] == want["update"]
        np.testing.assert_allclose(got["loss/total"], want["loss/total"], rtol=1e-4, err_msg=f"loss at update {got['update']}")


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


def test_resume_takes_the_multi_process_flags_and_splits_the_devices_among_the_processes(tiny_run_dir):
    from rlpar.tools import resume

    def run_flags(argv):  # the expanded command line's run flags, as {flag: value}
        expanded = resume.expand(["--resume", str(tiny_run_dir), *argv]).argv[1:]
        flags = {}
        for i, arg in enumerate(expanded):
            if arg.startswith("--"):  # a flag with a value, or a boolean one (--tensorboard, --no-...)
                has_value = i + 1 < len(expanded) and not expanded[i + 1].startswith("--")
                flags[arg] = expanded[i + 1] if has_value else True
        return flags

    # The tiny run used 2 devices in one process: resumed as is, or by 2 processes with one device each.
    alone = run_flags([])
    assert (alone["--devices"], alone["--num-processes"], alone["--coordinator"]) == ("2", "1", "")
    split = run_flags(["--coordinator", "10.0.0.1:1234", "--num-processes", "2", "--process-id=1",
                       "--heartbeat-timeout-s", "20"])
    assert (split["--devices"], split["--num-processes"], split["--process-id"]) == ("1", "2", "1")
    assert (split["--coordinator"], split["--heartbeat-timeout-s"]) == ("10.0.0.1:1234", "20")
    with pytest.raises(ValueError, match="num_processes=3: the run in .* used 2 devices, which 3 processes cannot "
                                         "share equally; use a divisor of 2"):
        resume.expand(["--resume", str(tiny_run_dir), "--num-processes", "3"])
    with pytest.raises(ValueError, match="only the multi-process flags may be given again.*drop --num-envs 2$"):
        resume.expand(["--resume", str(tiny_run_dir), "--process-id", "2", "--num-envs", "2"])


def test_sigterm_to_one_process_stops_both_after_the_same_update_and_they_resume_together(tmp_path):
    # A scheduler may signal one task first: process 1 gets SIGTERM, process 0 none. After each chunk the processes
    # agree whether any was signalled, so both stop after the same update, save that checkpoint together and exit 75.
    config = CONFIG.replace(total_timesteps=8 * 16 * 60)  # 60 updates of one chunk each: time for the signal
    run_dir = tmp_path / "run"
    flags = ["--env", "CartPole-v1", "--log-every", "1", "--checkpoint-every", "1000", "--eval-every", "0",
             "--run-dir", str(run_dir), *_config_flags(config)]
    port = _free_port()
    first = {f"first{i}": _start([sys.executable, "-m", "rlpar.train", "ppo", *flags,
                                  *_process_flags(port, i, heartbeat_timeout_s=30)], tmp_path, f"first{i}",
                                 extra_env={"PYTHONPATH": str(REPO)})
             for i in range(2)}
    try:
        deadline = time.monotonic() + PROCESS_DEADLINE_S
        metrics = run_dir / rundir.METRICS
        while (not metrics.exists() or len(metrics.read_text().splitlines()) < 2) and time.monotonic() < deadline \
                and all(p.poll() is None for p in first.values()):
            time.sleep(0.05)
        first["first1"].send_signal(signal.SIGTERM)
        reference = run(agents.ppo.SPEC, config, RunConfig(env="CartPole-v1", devices=4, log_every=1, eval_every=0))
    finally:
        _wait_all(first, tmp_path, time.monotonic() + PROCESS_DEADLINE_S)
    for name, proc in first.items():
        assert proc.returncode == 75, f"{name}:\n{_output(tmp_path, name)}"
    [stopped] = checkpoint.Checkpoints(run_dir / rundir.CHECKPOINTS).committed_steps()
    assert 2 <= stopped < 60 and len((run_dir / rundir.METRICS).read_text().splitlines()) == stopped
    for i in range(2):
        assert f"preempted at update {stopped}; checkpoint saved" in (tmp_path / f"first{i}.err").read_text()

    port = _free_port()
    resumed = {f"resumed{i}": _start([sys.executable, "-m", "rlpar.train", "--resume", str(run_dir),
                                      *_process_flags(port, i, heartbeat_timeout_s=30)[2:]], tmp_path, f"resumed{i}")
               for i in range(2)}
    _wait_all(resumed, tmp_path, time.monotonic() + PROCESS_DEADLINE_S)
    for name, proc in resumed.items():
        assert proc.returncode == 0, f"{name} failed:\n{_output(tmp_path, name)}"
    checkpoints = checkpoint.Checkpoints(run_dir / rundir.CHECKPOINTS)
    assert checkpoints.committed_steps() == [stopped, 60]
    expected = parallel.rows_to_host(reference.state)
    _assert_states_close(checkpoints.restore(60, template=expected).state, expected, "2 processes, preempted")
