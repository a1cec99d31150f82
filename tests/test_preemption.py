"""SIGTERM and SIGUSR1 (a scheduler's notice): the run finishes its chunk, saves a checkpoint, prints how to continue
and exits 75; resumed, it ends bit-identical to a run never stopped. A second signal, or the grace period passing,
ends it at once without damaging the newest complete checkpoint. Real signals, sent to ``python -m rlpar.train`` in
fresh processes started from a temporary directory with relative paths."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from rlpar.run import preemption, rundir
from rlpar.run.checkpoint import Checkpoints
from rlpar.tools import train as train_cli

from conftest import final_state

REPO = Path(__file__).resolve().parents[1]
# 240 updates of one chunk each, no periodic checkpoint before the end: the only other one is the preemption's.
FLAGS = ["ppo", "--env", "CartPole-v1", "--devices", "2", "--num-envs", "4", "--num-steps", "8",
         "--total-timesteps", str(4 * 8 * 240), "--num-minibatches", "2", "--update-epochs", "1",
         "--hidden-sizes", "8", "--log-every", "1", "--checkpoint-every", "1000", "--eval-every", "0"]
DEADLINE_S = 300


def _start(cwd: Path, argv: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "RLPAR_CACHE_DIR": "off", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "rlpar.train", *argv], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _records(run_dir: Path) -> int:
    path = run_dir / rundir.METRICS
    return len(path.read_text().splitlines()) if path.exists() else 0


def _signal_after(proc: subprocess.Popen, run_dir: Path, records: int, signum: int) -> tuple[str, str]:
    """Send ``signum`` once ``run_dir`` holds ``records`` metrics lines; wait for the process to end."""
    deadline = time.monotonic() + DEADLINE_S
    while _records(run_dir) < records and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before the signal: " + proc.communicate()[1][-2000:]
    proc.send_signal(signum)
    return proc.communicate(timeout=DEADLINE_S)


def _stopped_at(stderr: str, run_dir: str) -> int:
    """The update named by the one line a preempted run prints, checked to say how to continue."""
    [line] = [line for line in stderr.splitlines() if line.startswith("preempted at update")]
    update = int(line.split()[3].rstrip(";"))
    assert line == f"preempted at update {update}; checkpoint saved; continue with: python -m rlpar.train " \
                   f"--resume {run_dir}"
    return update


def test_sigusr1_then_sigterm_stop_save_and_resume_bit_identically(tmp_path):
    run_dir = tmp_path / "run"
    first = _start(tmp_path, [*FLAGS, "--run-dir", "run"])  # compiles while the reference runs here
    reference_dir = tmp_path / "reference"
    assert train_cli.main([*FLAGS, "--run-dir", str(reference_dir)]) == 0

    _, stderr = _signal_after(first, run_dir, 3, signal.SIGUSR1)  # SLURM's early notice (sbatch --signal)
    assert first.returncode == preemption.EXIT_CODE == 75, stderr[-2000:]
    update = _stopped_at(stderr, "run")
    assert 3 <= update < 240 and "Traceback" not in stderr
    assert Checkpoints(run_dir / rundir.CHECKPOINTS).committed_steps() == [update]  # saved where it stopped
    assert _records(run_dir) == update  # and logged up to there, not beyond

    second = _start(tmp_path, ["--resume", "run"])  # continued, then stopped again, by SIGTERM this time
    _, stderr = _signal_after(second, run_dir, update + 3, signal.SIGTERM)
    assert second.returncode == 75, stderr[-2000:]
    again = _stopped_at(stderr, "run")
    assert update < again < 240
    assert Checkpoints(run_dir / rundir.CHECKPOINTS).committed_steps() == [update, again]

    assert train_cli.main(["--resume", str(run_dir)]) == 0  # to the end, in this process
    assert (run_dir / rundir.METRICS).read_bytes() == (reference_dir / rundir.METRICS).read_bytes()
    resumed, reference = final_state(run_dir), final_state(reference_dir)
    assert jax.tree.structure(resumed) == jax.tree.structure(reference)
    jax.tree.map(np.testing.assert_array_equal, resumed, reference)  # parameters, optimizer, envs, keys: everything


def test_a_preempted_run_without_a_run_dir_says_nothing_was_saved(tmp_path):
    proc = _start(tmp_path, FLAGS)
    deadline = time.monotonic() + DEADLINE_S
    while not (proc.stdout.readline() or "update").startswith("update") and time.monotonic() < deadline:
        pass  # the progress lines ("update 1/240 ..."): the first one is printed after the first chunk
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 75, stderr[-2000:]
    assert any(line.startswith("preempted at update") and line.endswith("(SIGTERM); nothing saved: no --run-dir")
               for line in stderr.splitlines()), stderr[-2000:]


# A user's env whose every step sleeps 0.2 s on the host and appends a line to steps.log: a chunk of 4 updates x 4
# steps takes 3.2 s or more, longer than the grace period given below. The test signals once the log shows the
# second chunk's second step (line 18), so the signal lands in the middle of that chunk, never in the moment between
# the first chunk's checkpoint and the runner's look at the flag (which stops cleanly at update 4, as it should).
SLOW_ENV = """
import time
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces


def _step_taken():
    time.sleep(0.2)
    with open("steps.log", "a") as log:
        log.write("step\\n")


@struct.dataclass
class State(environment.EnvState):
    pass


class Slow(environment.Environment):
    @property
    def default_params(self):
        return environment.EnvParams(max_steps_in_episode=100)

    def reset_env(self, key, params):
        return jnp.zeros(2), State(time=0)

    def step_env(self, key, state, action, params):
        jax.debug.callback(_step_taken)
        return jnp.zeros(2), State(time=state.time + 1), jnp.float32(1.0), jnp.bool_(False), {}

    def is_terminated(self, state, params):
        return jnp.bool_(False)

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)
"""
SLOW_FLAGS = ["ppo", "--env", "slow_env:Slow", "--num-envs", "1", "--num-steps", "4", "--total-timesteps", "48",
              "--num-minibatches", "1", "--update-epochs", "1", "--hidden-sizes", "8", "--log-every", "4",
              "--checkpoint-every", "4", "--eval-every", "0", "--run-dir", "run"]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["second signal", "grace period"])
def test_a_second_signal_or_the_grace_period_ends_the_run_at_once_and_the_newest_checkpoint_resumes(tmp_path, how):
    (tmp_path / "slow_env.py").write_text(SLOW_ENV)
    run_dir = tmp_path / "run"
    grace = "1" if how == "grace period" else "600"
    proc = _start(tmp_path, [*SLOW_FLAGS, "--preemption-grace-s", grace])
    deadline = time.monotonic() + DEADLINE_S
    steps = tmp_path / "steps.log"
    while (not steps.exists() or len(steps.read_text().splitlines()) < 18) and time.monotonic() < deadline:
        time.sleep(0.05)  # the second chunk's second step: 14 steps (2.8 s) of it are still to run
    assert proc.poll() is None and Checkpoints(run_dir / rundir.CHECKPOINTS).latest() == 4
    proc.send_signal(signal.SIGTERM)
    if how == "second signal":
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    expected = "SIGTERM again: stopping now" if how == "second signal" else "no clean stop within 1s of SIGTERM"
    assert expected in stderr and "the newest complete checkpoint is kept" in stderr
    checkpoints = Checkpoints(run_dir / rundir.CHECKPOINTS)
    assert checkpoints.committed_steps() == [4]
    # A half-written checkpoint, as a kill in the middle of orbax's save leaves: removed at the next start.
    (run_dir / rundir.CHECKPOINTS / "8.orbax-checkpoint-tmp-1234").mkdir()
    resumed = _start(tmp_path, ["--resume", "run"])
    _, stderr = resumed.communicate(timeout=DEADLINE_S)
    assert resumed.returncode == 0, stderr[-2000:]
    assert checkpoints.committed_steps() == [8, 12] and not checkpoints.uncommitted()
