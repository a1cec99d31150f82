"""The README's commands as a user types them: fresh processes, relative paths, from the run's own folder.

orbax 0.12 refuses relative checkpoint paths: ``--run-dir runs/cp`` once died at its first checkpoint, and evaluate or
``--resume`` of a relative run dir called a good checkpoint corrupt. Also what the progress display shows while the
update program compiles.
"""

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlpar.run import rundir
from rlpar.run.progress import ProgressDisplay

REPO = Path(__file__).resolve().parents[1]
NUM_UPDATES = 40  # with a checkpoint every 2 updates the run lasts seconds: time to kill it half-way
TRAIN = ["ppo", "--env", "CartPole-v1", "--devices", "2", "--num-envs", "4", "--num-steps", "8",
         "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "16,16", "--log-every", "1",
         "--total-timesteps", str(4 * 8 * NUM_UPDATES), "--checkpoint-every", "2"]



def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _run(args: list[str], cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    return output


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.is_file() else 0


@pytest.mark.slow  # moved out of the default run for its length; CI runs the slow set too
def test_train_plot_evaluate_and_kill_resume_with_relative_paths(tmp_path):
    _run(["rlpar.train", *TRAIN, "--run-dir", "runs/cp"], cwd=tmp_path)
    run_dir = tmp_path / "runs" / "cp"
    assert (run_dir / rundir.CONFIG).is_file() and _lines(run_dir / rundir.METRICS) == NUM_UPDATES
    assert sorted(p.name for p in (run_dir / rundir.CHECKPOINTS).iterdir()) == [str(NUM_UPDATES - 2),
                                                                                 str(NUM_UPDATES)]

    assert "wrote curve.png" in _run(["rlpar.plot", "runs/cp", "--out", "curve.png"], cwd=tmp_path)
    assert (tmp_path / "curve.png").stat().st_size > 0
    _run(["rlpar.plot", "runs/cp"], cwd=tmp_path)  # default --out: inside the run dir
    assert (run_dir / "learning_curve.png").is_file()
    _run(["rlpar.plot", "runs/cp", "--out", "plots/new/curve.png"], cwd=tmp_path)  # a folder that is not there yet
    assert (tmp_path / "plots" / "new" / "curve.png").is_file()

    assert "runs/cp: greedy policy, 2 episodes: return" in _run(["rlpar.evaluate", "runs/cp", "--episodes", "2"],
                                                                 cwd=tmp_path)

    # The same run killed with SIGKILL once it has logged 3 updates (a checkpoint after update 2 is then on disk),
    # resumed by its relative dir: its metrics.jsonl ends byte for byte like the uninterrupted run's.
    killed = tmp_path / "runs" / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "rlpar.train", *TRAIN, "--run-dir", "runs/killed"], cwd=tmp_path,
                            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while _lines(killed / rundir.METRICS) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL, proc.stderr.read().decode()[-3000:]
    proc.stderr.close()
    assert _lines(killed / rundir.METRICS) < NUM_UPDATES, "the run ended before it could be killed"

    _run(["rlpar.train", "--resume", "runs/killed"], cwd=tmp_path)
    assert (killed / rundir.METRICS).read_bytes() == (run_dir / rundir.METRICS).read_bytes()
    assert _lines(killed / rundir.TIMING) == NUM_UPDATES


def test_plain_progress_says_it_is_compiling_then_how_long_it_took():
    out = io.StringIO()  # not a terminal: plain lines
    with ProgressDisplay(num_updates=4, steps_per_update=10, stream=out) as show:
        show.compiling()
        show.compiled(6.43)
        show.compiling()
        show.compiled(0.21, cached=True)
    assert out.getvalue().splitlines() == ["compiling the update program...", "compiled in 6.4s",
                                           "compiling the update program...",
                                           "compiled in 0.2s (from the compilation cache)"]


def test_live_progress_shows_compiling_on_the_bar_until_compiled():
    out = io.StringIO()
    with ProgressDisplay(num_updates=4, steps_per_update=10, stream=out, live=True) as show:
        show.compiling()
        during = out.getvalue()
        show.compiled(6.43)
        show({"update": 4, "env_steps": 40, "time_s": 1.0, "sps": 20.0, "episode_return": 9.5, "loss/total": 0.1})
    assert "update 0/4" in during and "compiling the update program..." in during
    after = out.getvalue()[len(during):]
    assert "compiled in 6.4s" in after
    assert "compiling" not in after.rsplit("compiled in 6.4s", 1)[1]  # the status is gone from the bar
