"""Signals and Ctrl-C while the run's programs compile, and what the progress display says of a long compile.

The runner waits for every compile in short slices on the main thread (``rlpar.run.compiling``), so a scheduler's
SIGTERM or SIGUSR1 stops a compiling run at once (exit 75, nothing to save yet) and Ctrl-C ends it within a second.
The end-to-end tests send real signals to ``python -m rlpar.train`` in fresh processes, on a user's env that XLA
takes long to compile (a chain of sorts in its step): the signal lands while the main thread would otherwise sit in
XLA's C++ compile, where Python runs no signal handler.
"""

import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rlpar.run import compile_cache, compiling, preemption
from rlpar.run.progress import PLAIN_MARKS_S, ProgressDisplay, plain_marks_passed
from rlpar.tools import train as train_cli
from tests.helpers import sigint_as_in_a_terminal

# Compiled as a user's run compiles: the signals must land in XLA's real compile, and the README's programs are the
# ones JAX 0.11's XLA:CPU once never finished compiling.
pytestmark = pytest.mark.full_optimization

REPO = Path(__file__).resolve().parents[1]
PROMPT_S = 5  # from the signal to the process's end, with room for a loaded test host (it takes well under 1 s)

# A user's env whose step sorts its state 1000 times: tracing it takes a second or two, XLA's compile of the chunk
# program far longer than the tests wait, whose signals all land in the middle of that compile.
SLOW_COMPILE_ENV = """
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

SORTS = 1000


@struct.dataclass
class State(environment.EnvState):
    x: jax.Array


class SlowToCompile(environment.Environment):
    @property
    def default_params(self):
        return environment.EnvParams(max_steps_in_episode=100)

    def reset_env(self, key, params):
        return jnp.zeros(4), State(time=0, x=jnp.zeros(4))

    def step_env(self, key, state, action, params):
        x = state.x + action
        for i in range(SORTS):
            x = jnp.sort(x * (i + 1.0)) + 1.0
        x = jnp.tanh(x)
        return x, State(time=state.time + 1, x=x), jnp.float32(1.0), jnp.bool_(False), {}

    def is_terminated(self, state, params):
        return jnp.bool_(False)

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (4,), jnp.float32)
"""
FLAGS = ["ppo", "--env", "slow_compile_env:SlowToCompile", "--num-envs", "2", "--num-steps", "4",
         "--total-timesteps", "16", "--num-minibatches", "1", "--update-epochs", "1", "--hidden-sizes", "8",
         "--log-every", "2", "--eval-every", "0"]
DEADLINE_S = 300


def _environment() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), "."]), "RLPAR_CACHE_DIR": "off",
            "PYTHONUNBUFFERED": "1"}


def _start_compiling(tmp_path: Path, argv: list[str]) -> tuple[subprocess.Popen, str]:
    """The CLI on the slow env, once its progress says the chunk program has compiled for a few seconds:
    ``(process, that line)``."""
    (tmp_path / "slow_compile_env.py").write_text(SLOW_COMPILE_ENV)
    proc = subprocess.Popen([sys.executable, "-m", "rlpar.train", *argv], cwd=tmp_path, env=_environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_in_a_terminal)  # as in a terminal, whatever started the tests
    deadline = time.monotonic() + DEADLINE_S
    line = ""
    while not line.startswith("compiling the chunk") and time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, "the run ended before its compile was reported: " + proc.communicate()[1][-2000:]
    return proc, line.strip()


def _signal(proc: subprocess.Popen, signum: int) -> tuple[str, str, float]:
    """Send ``signum``; ``(stdout, stderr, seconds until the process ended)``."""
    sent = time.monotonic()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=DEADLINE_S)
    return out, err, time.monotonic() - sent


def test_sigterm_while_compiling_says_so_at_once_and_exits_75(tmp_path):
    proc, line = _start_compiling(tmp_path, FLAGS)
    # the plain display's first line of a long compile: what compiles and for how long, printed at the first mark
    # (5 s) or, on a loaded host whose main thread polls late, before the second (15 s)
    match = re.fullmatch(r"compiling the chunk.*\.\.\. (\d+)s", line)
    assert match and PLAIN_MARKS_S[0] <= int(match[1]) < PLAIN_MARKS_S[1], line
    out, err, seconds = _signal(proc, signal.SIGTERM)
    assert proc.returncode == preemption.EXIT_CODE == 75, err[-2000:]
    assert seconds < PROMPT_S and "compiled in" not in out  # stopped in the middle of the compile
    first, last = err.strip().splitlines()
    assert first.startswith("rlpar: SIGTERM received while compiling the chunk")
    assert first.endswith(": nothing to save yet, stopping")
    assert last == "preempted while compiling, before the first update (SIGTERM); nothing to save yet"


def test_ctrl_c_while_compiling_ends_the_run_at_once_with_one_line(tmp_path):
    proc, _ = _start_compiling(tmp_path, FLAGS)
    out, err, seconds = _signal(proc, signal.SIGINT)
    assert proc.returncode == 130 and seconds < PROMPT_S, err[-2000:]
    assert err.strip() == "interrupted before the first update; nothing of this run was saved"
    assert "compiled in" not in out


@pytest.mark.slow  # a second slow-to-compile process (about 10 s); CI runs it (-m slow)
def test_sigusr1_while_compiling_a_run_with_a_run_dir_exits_75_and_it_starts_again(tmp_path):
    proc, _ = _start_compiling(tmp_path, [*FLAGS, "--run-dir", "run"])
    _, err, seconds = _signal(proc, signal.SIGUSR1)
    assert proc.returncode == 75 and seconds < PROMPT_S, err[-2000:]
    assert err.strip().splitlines()[-1] == ("preempted while compiling, before the first update (SIGUSR1); "
                                            "nothing to save yet")
    # nothing was saved, so the same command starts the run again (it is not refused as a second run there)
    again = subprocess.run([sys.executable, "-m", "rlpar.train", *FLAGS, "--run-dir", "run", "--dry-run"],
                           cwd=tmp_path, env=_environment(), capture_output=True, text=True, timeout=DEADLINE_S)
    assert again.returncode == 0, again.stderr[-2000:]


def test_the_readmes_command_compiles_its_programs_and_trains_an_update_in_a_fresh_process(tmp_path):
    # The README's training command as a user types it (one device, the defaults: 8 envs x 128 steps, the greedy
    # evaluation at the end), cut to one update; its timeout is what catches a compile that never ends.
    proc = subprocess.run([sys.executable, "-m", "rlpar.train", "ppo", "--env", "CartPole-v1",
                           "--total-timesteps", str(8 * 128)], cwd=tmp_path, env=_environment(),
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "compiled in" in proc.stdout and "Very slow compile" not in proc.stderr, proc.stdout + proc.stderr[-2000:]
    assert "8 envs x 128 steps" in proc.stdout and "greedy evaluation at update 1 (64 episodes)" in proc.stdout, \
        proc.stdout


LIBRARY_RUN = """
import os, signal, threading, time
from agents.ppo import SPEC, PPOConfig
from rlpar.core import platform
from rlpar.run import preemption, runner

sent = []


def on_status(event, info):
    # once the evaluation program compiles too (a program of its own, as on accelerators): SIGTERM from a thread
    if event == "still compiling" and "evaluation" in info["programs"] and not sent:
        sent.append(time.monotonic() + 0.5)
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()


config = PPOConfig(num_envs=2, num_steps=4, total_timesteps=16, num_minibatches=1, update_epochs=1, hidden_sizes=(8,))
try:
    with platform.forcing(evaluation_in_chunk=False):
        runner.run(SPEC, config, runner.RunConfig(env="slow_compile_env:SlowToCompile", log_every=2, eval_every=1,
                                                  num_seeds=2), hooks=runner.Hooks(on_status=on_status))
except preemption.Preempted as stop:
    print(f"preempted compiling={stop.compiling} after {time.monotonic() - sent[0]:.2f}", flush=True)
    os._exit(0)  # the abandoned compiles would finish before the interpreter exits
"""


@pytest.mark.slow  # a slow-to-compile process (about 10 s); CI runs it (-m slow)
def test_a_python_callers_run_of_two_seeds_stops_while_its_evaluation_program_compiles(tmp_path):
    (tmp_path / "slow_compile_env.py").write_text(SLOW_COMPILE_ENV)
    proc = subprocess.run([sys.executable, "-c", LIBRARY_RUN], cwd=tmp_path, env=_environment(),
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said, seconds = proc.stdout.strip().rsplit(" ", 1)
    assert said == "preempted compiling=True after" and float(seconds) < PROMPT_S, proc.stdout
    assert "SIGTERM received while compiling the chunk" in proc.stderr and "evaluation" in proc.stderr


# ---- the wait itself, with threads blocked on a lock (a C call without Python's lock, as XLA's compile is) ----

class _Stop(Exception):
    pass


def test_a_signalled_watch_stops_the_wait_while_the_compile_is_blocked(capsys):
    release = threading.Event()
    with preemption.Watch(grace_s=600) as watch, compiling.Compiles(watch, stop=_Stop) as compiles:
        pending = compiles.start("test", release.wait)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        start = time.monotonic()
        with pytest.raises(_Stop, match="SIGUSR1"):
            compiles.wait(pending)
        assert time.monotonic() - start < 2 and not pending.done.is_set()
    assert watch.compiling is None  # the signal's message is the chunk loop's again
    release.set()
    assert pending.done.wait(10)
    assert capsys.readouterr().err.strip() == ("rlpar: SIGUSR1 received while compiling the test program: nothing "
                                               "to save yet, stopping")


def test_ctrl_c_raises_in_the_wait_while_the_compile_is_blocked():
    release = threading.Event()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a test run may have SIGINT ignored
    try:
        compiles = compiling.Compiles()
        pending = compiles.start("test", release.wait)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            compiles.wait(pending)
        assert time.monotonic() - start < 2 and not pending.done.is_set()
    finally:
        signal.signal(signal.SIGINT, previous)
        release.set()
    assert pending.done.wait(10)


def test_call_returns_or_raises_what_the_work_did_and_counts_its_cache_hits_here():
    compiles = compiling.Compiles()
    before = compile_cache.hits()
    assert compiles.call("test", lambda: compile_cache.count_hits(2) or "compiled") == "compiled"
    assert compile_cache.hits() == before + 2  # the thread's hits, as the runner compares them

    def fail():
        raise ValueError("bad program")

    with pytest.raises(ValueError, match="bad program"):
        compiles.call("test", fail)
    assert compiles.describe() == "the run's programs"  # nothing left compiling


def test_a_long_wait_is_reported_once_a_second_with_what_compiles():
    clock = itertools.count(0.0, 0.5)  # each look at the clock is half a second later
    statuses, release, init_done = [], threading.Event(), threading.Event()

    def on_status(event, info):
        statuses.append((event, info["programs"], int(info["seconds"])))
        if info["seconds"] >= 6:
            release.set()

    compiles = compiling.Compiles(on_status=on_status, clock=lambda: next(clock), poll_s=0.05)
    with compiles.compiling("chunk"):
        init = compiles.start("init", init_done.wait)
        compiles.call("chunk", release.wait)
    # from QUIET_S (3 s) on, once per whole second; the chunk and the init beside it (and perhaps a second more
    # while the released thread ends)
    assert statuses[:4] == [("still compiling", "the chunk and init programs", s) for s in (3, 4, 5, 6)]
    assert [s for _, _, s in statuses[4:]] in ([], [7])
    init_done.set()
    assert compiles.wait(init) is True and compiles.describe() == "the run's programs"


@pytest.mark.parametrize("programs, expected", [
    ([], "the run's programs"), (["chunk"], "the chunk program"), (["chunk", "init"], "the chunk and init programs"),
    (["chunk", "evaluation", "init"], "the chunk, evaluation and init programs")])
def test_describe_names_the_programs(programs, expected):
    assert compiling.describe(programs) == expected


# ---- the progress display and the command line's lines ----

def test_plain_progress_prints_a_long_compile_a_few_times_then_once_a_minute():
    import io

    out = io.StringIO()
    with ProgressDisplay(num_updates=4, steps_per_update=10, stream=out) as show:
        show.compiling()
        for seconds in range(3, 131):
            show.still_compiling("the chunk program", seconds + 0.2)
        show.compiled(130.5)
    assert out.getvalue().splitlines() == [
        "compiling the update program...", "compiling the chunk program... 5s", "compiling the chunk program... 15s",
        "compiling the chunk program... 30s",
        "still compiling the chunk program (60s); Ctrl-C stops the run safely",
        "still compiling the chunk program (120s); Ctrl-C stops the run safely", "compiled in 130.5s"]
    assert [plain_marks_passed(s) for s in (4, 16, 61, 125)] == [0, 2, 4, 5]


def test_live_progress_shows_the_programs_and_seconds_then_that_ctrl_c_is_safe(monkeypatch):
    import io

    monkeypatch.setenv("COLUMNS", "200")  # a terminal wide enough for the bar and its status
    out = io.StringIO()
    with ProgressDisplay(num_updates=4, steps_per_update=10, stream=out, live=True) as show:
        show.compiling()
        show.still_compiling("the chunk and init programs", 12.3)
        early = out.getvalue()
        show.still_compiling("the evaluation program", 75.0)
        late = out.getvalue()[len(early):]
        show.compiled(80.0)
    assert "compiling the chunk and init programs... 12s" in early
    # on the bar, and past a minute a line above it too (whole on a narrow terminal, where the bar crops its status)
    line = "still compiling the evaluation program (75s); Ctrl-C stops the run safely"
    assert f"\x1b[2K{line}\n" in late and f"? {line}" in late


@pytest.mark.parametrize("checkpoint, line", [
    (None, "preempted while compiling, before the first update (SIGTERM); nothing to save yet"),
    (40, "preempted while compiling (SIGTERM); newest checkpoint: update 40; continue with: python -m rlpar.train "
         "--resume runs/x")])
def test_the_line_of_a_run_preempted_while_compiling(checkpoint, line):
    stop = preemption.Preempted(40 if checkpoint else 0, checkpoint, "runs/x", "SIGTERM", compiling=True)
    assert train_cli.preempted_line(stop) == line
