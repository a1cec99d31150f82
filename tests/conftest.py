"""Four fake CPU devices for every test, set before the first JAX computation; a compilation cache of the session's
own, shared by the tests and the processes they start (identical programs compile once), never the user's."""

import os
import tempfile

import jax
import pytest

NUM_TEST_DEVICES = 4
jax.config.update("jax_num_cpu_devices", NUM_TEST_DEVICES)
os.environ["RLPAR_CACHE_DIR"] = tempfile.mkdtemp(prefix="rlpar-test-cache-")


# A tiny finished run (2 devices, 6 updates of one chunk each, checkpoints every 2 updates, TensorBoard on), trained
# once per session through the CLI; tests that read a run dir share it and must copy it before changing anything.
TINY_RUN_ARGV = [
    "ppo", "--env", "CartPole-v1", "--devices", "2", "--num-envs", "4", "--num-steps", "8",
    "--total-timesteps", str(4 * 8 * 6), "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "16,16",
    "--log-every", "1", "--checkpoint-every", "2", "--tensorboard",
]


@pytest.fixture(scope="session")
def tiny_run_dir(tmp_path_factory):
    from rlpar import train

    run_dir = tmp_path_factory.mktemp("tiny") / "run"
    assert train.main([*TINY_RUN_ARGV, "--run-dir", str(run_dir)]) == 0
    return run_dir
