"""Four fake CPU devices for every test, set before the first JAX computation; no persistent compilation cache
(``tests/test_compile_cache.py`` gives its runs their own), so the tests never touch the user's."""

import os

import jax
import pytest

NUM_TEST_DEVICES = 4
jax.config.update("jax_num_cpu_devices", NUM_TEST_DEVICES)
# Start the backend now: importing rlpar starts none, and the first test to ask for --devices 2 would otherwise
# start it with 2. Once started, the count stays 4 whatever a test asks.
assert len(jax.devices()) == NUM_TEST_DEVICES
# Off for the suite: once, in a full run with the cache on, XLA:CPU aborted the whole pytest process while
# serializing an executable for it (not reproduced in isolation; see benchmarks/README.md).
os.environ["RLPAR_CACHE_DIR"] = "off"


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
    from rlpar import train

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
