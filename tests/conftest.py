"""Four fake CPU devices for every test, set before the first JAX computation; no persistent compilation cache
(``tests/test_compile_cache.py`` gives its runs their own), so the tests never touch the user's. The test files run
in worker processes (pytest-xdist, ``-n auto`` in pyproject.toml), each set up as above; ``-n 0`` runs them all in
this one process (a debugger, ``--pdb``)."""

import os

import jax
import pytest

NUM_TEST_DEVICES = 4

# The compatibility set (``python -m pytest -m compat``): tests that between them compile every kind of program a run
# makes (each agent's chunk and evaluation programs, a resume, ``rlpar.evaluate``, a sweep, a population, the docs'
# dry runs) and the JAX-version-specific code. CI runs it on the JAX leg that does not run the whole default set.
COMPAT = (
    "tests/test_library_api.py::test_train_runs_on_a_tiny_budget_and_returns_the_documented_result",
    "tests/test_eval.py::test_every_agent_evaluates_through_its_policy_export_with_known_probe_answers",
    "tests/test_checkpoint.py::test_sigkill_between_checkpoints_then_resume_is_bit_identical_evaluations_included",
    "tests/test_evaluate.py::test_evaluate_cli_reports_mean_and_std_of_the_greedy_policy",
    "tests/test_seeds.py::test_one_seed_for_many_slots_compiles_without_xla_error_lines",
    "tests/test_population.py::test_pbt_run_compiles_one_program_while_its_values_change",
    "tests/test_marl_agents.py::test_sigkill_then_resume_is_bit_identical_and_the_team_evaluates",
    "tests/test_docs.py::test_skipped_blocks_training_command_passes_a_dry_run",
    "tests/test_jax_internals.py",
    "tests/test_cpu_paths.py",
    "tests/test_compiling.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if item.nodeid.startswith(COMPAT):
            item.add_marker(pytest.mark.compat)


WORKER_MEMORY = 4 * 2**30  # a worker's peak (about 1.9 GB resident) and the CLI runs it starts, with room


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: without xdist (the device tests' run) it is not known
def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one worker per core this process may run on, and no more than the available memory holds. The
    suite is compile-bound, and one process alone kept 1.44 of 2 cores busy (tracing is Python's one thread; XLA's
    compile uses about 1.7 cores), so a worker per core is what keeps every core busy; more only adds memory."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, _available_memory() // WORKER_MEMORY))


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return WORKER_MEMORY * (os.cpu_count() or 1)  # not Linux: cores alone decide


jax.config.update("jax_num_cpu_devices", NUM_TEST_DEVICES)
# Start the backend now: importing rlpar starts none, and the first test to ask for --devices 2 would otherwise
# start it with 2. Once started, the count stays 4 whatever a test asks. The CPU's devices: on a machine with an
# accelerator (``-m device``) JAX's default devices are the accelerator's.
assert len(jax.devices("cpu")) == NUM_TEST_DEVICES
# Off for the suite: once, in a full run with the cache on, XLA:CPU aborted the whole pytest process while
# serializing an executable for it (not reproduced in isolation). Nor would a cache shared by the whole run save time:
# one tried (2026-12-04) took 11:25 against 10:25 without, since few tests compile a program another test compiled and
# writing every small program to disk cost more than the repeats saved.
os.environ["RLPAR_CACHE_DIR"] = "off"

# XLA's optimisations off (JAX's ``jax_disable_most_optimizations``: LLVM at level 0, its expensive passes skipped)
# for every test and every process a test starts, unless the test is marked ``full_optimization``: the suite's
# programs are tiny and compile-bound, and what a test checks (values, bit-identity, refusals) holds at any level, so
# compiling less is most of the time saved (docs/index.md, "Running the tests"). The marked tests compile what a
# user's run compiles, as it compiles it: the programs that have hung or crashed XLA:CPU before, the compile a signal
# must interrupt, and the learning runs, which run long enough for optimised code to pay.
# "0" (or "false", "no", "off") in the environment: every test optimised
_ASKED = os.environ.get("JAX_DISABLE_MOST_OPTIMIZATIONS", "1").strip().lower()
XLA_OPTIMIZATIONS_OFF = "0" if _ASKED in ("0", "false", "no", "off") else "1"
os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = XLA_OPTIMIZATIONS_OFF
jax.config.update("jax_disable_most_optimizations", XLA_OPTIMIZATIONS_OFF == "1")  # the session's fixtures too


@pytest.fixture(autouse=True)
def _xla_optimizations(request):
    """A test marked ``full_optimization`` (or in a module marked so, ``pytestmark``) compiles with XLA's
    optimisations on, in this process (JAX's config) and in the processes it starts (the environment variable)."""
    if request.node.get_closest_marker("full_optimization") is None:
        yield
        return
    os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "0"
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        yield
    finally:
        os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] = XLA_OPTIMIZATIONS_OFF
        jax.config.update("jax_disable_most_optimizations", XLA_OPTIMIZATIONS_OFF == "1")


# A tiny finished run (2 devices, 6 updates of one chunk each, checkpoints every 2 updates, a greedy evaluation of 8
# episodes after updates 3 and 6, TensorBoard on), trained once per session through the CLI; tests that read a run
# dir share it and must copy it before changing anything.
TINY_RUN_ARGV = [
    "ppo", "--env", "CartPole-v1", "--devices", "2", "--num-envs", "4", "--num-steps", "8",
    "--total-timesteps", str(4 * 8 * 6), "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "16,16",
    "--log-every", "1", "--checkpoint-every", "2", "--eval-every", "3", "--eval-episodes", "8", "--tensorboard",
]


@pytest.fixture(scope="session")
def tiny_run_dir(tmp_path_factory):
    from rlpar.tools import train

    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    assert train.main([*TINY_RUN_ARGV, "--run-dir", str(run_dir)]) == 0
    return run_dir


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test module: one long process compiles hundreds of them, and holding
    them all ended in a native crash inside XLA's compiler late in the run."""
    yield
    import gc

    jax.clear_caches()
    gc.collect()


# ---- a run killed mid-way and resumed (the replay agents' tests share these) ----

def start_killed_run(run_dir, argv: list[str], after_update: int = 4):
    """``python -m rlpar.train ARGV --run-dir RUN_DIR`` in a fresh process that ``tests/sigkill_after.py`` SIGKILLs
    right after update ``after_update``'s metrics line (before its checkpoint); returns the ``Popen``."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    return subprocess.Popen([sys.executable, str(Path(__file__).with_name("sigkill_after.py")), str(after_update),
                             *argv, "--run-dir", str(run_dir)], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def killed_run(request, tmp_path_factory):
    """The test module's ``TINY_ARGV`` run in a fresh process, SIGKILLed right after update 4's metrics line (before
    its checkpoint): ``(run_dir, Popen)``. Started first, so that it compiles and trains while ``tiny_run`` runs."""
    run_dir = tmp_path_factory.mktemp("killed") / "run"
    proc = start_killed_run(run_dir, request.module.TINY_ARGV)
    yield run_dir, proc
    if proc.poll() is None:
        proc.kill()
    proc.communicate()


@pytest.fixture(scope="module")
def tiny_run(killed_run, request, tmp_path_factory):
    """The test module's ``TINY_ARGV`` run whole through the CLI in this process; its run dir."""
    from rlpar.tools import train

    run_dir = tmp_path_factory.mktemp("tiny_run") / "run"
    assert train.main([*request.module.TINY_ARGV, "--run-dir", str(run_dir)]) == 0
    return run_dir


def final_state(run_dir):
    """The newest checkpoint's whole state (host arrays) of a run dir."""
    from rlpar.run import rundir
    from rlpar.run.checkpoint import Checkpoints

    checkpoints = Checkpoints(run_dir / rundir.CHECKPOINTS)
    return checkpoints.restore(checkpoints.latest()).state


def resume_and_compare(killed_run_dir, proc, uninterrupted_run_dir, killed_before: list[int]):
    """Wait for the killed process, check which checkpoints it left, resume it through the CLI, and check the
    metrics file and the whole final state (every array) equal the uninterrupted run's; returns the resumed state."""
    import signal

    import numpy as np

    from rlpar.run import rundir
    from rlpar.run.checkpoint import Checkpoints
    from rlpar.tools import train as train_cli

    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, stderr[-2000:]
    assert Checkpoints(killed_run_dir / rundir.CHECKPOINTS).committed_steps() == killed_before
    assert train_cli.main(["--resume", str(killed_run_dir)]) == 0
    assert (killed_run_dir / rundir.METRICS).read_bytes() == (uninterrupted_run_dir / rundir.METRICS).read_bytes()
    resumed, uninterrupted = final_state(killed_run_dir), final_state(uninterrupted_run_dir)
    assert jax.tree.structure(resumed) == jax.tree.structure(uninterrupted)
    jax.tree.map(np.testing.assert_array_equal, resumed, uninterrupted)  # buffers, keys, counters: everything
    return resumed
