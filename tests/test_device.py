"""What must hold on whatever backend JAX finds (marker ``device``): on a machine with an accelerator
``python -m pytest -m device -n 0`` runs them there (the TPU or GPU is JAX's default backend; the four fake CPU
devices of ``conftest.py`` are not used). They are also marked ``slow``: the default run skips them, as each check
here is made on the CPU by a test of the default run too (bit-identical resumes in ``test_checkpoint.py``, slots
against single programs in ``test_seeds.py``, learning on the probes, a user's env in ``test_engine_api.py``), and
CI's slow run takes them. Each names the backend it ran on in its output.

Same seed twice, byte-identical; a short PPO run learns CartPole; a user's own env through ``agents.ppo.train``;
a run cut after a checkpoint and resumed ends bit-identical to the run that was not cut; ``rlpar.evaluate`` on it;
slot 0 of a two-seed (vmapped) program updates as the one-seed program given its keys.
"""

import shutil
from pathlib import Path

import jax
import numpy as np
import pytest

import agents
from agents.ppo import PPOConfig
from rlpar.run import rundir
from rlpar.run.checkpoint import Checkpoints
from rlpar.tools import train as train_cli
from rlpar.tools.evaluate import evaluate

pytestmark = [pytest.mark.device, pytest.mark.slow]

SMALL = PPOConfig(num_envs=16, num_steps=32, total_timesteps=16 * 32 * 4, num_minibatches=2, update_epochs=2,
                  hidden_sizes=(32, 32))


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


def test_the_backend_is_named():
    print(f"backend {jax.default_backend()}: {jax.devices()}")
    assert jax.devices()


def test_the_same_seed_twice_is_byte_identical_and_another_seed_differs():
    runs = [agents.ppo.train(config, "CartPole-v1", devices=1)
            for config in (SMALL, SMALL, SMALL.replace(seed=1))]
    first, again, other = (_leaves(run.state) for run in runs)
    assert len(first) == len(again) and all(a.tobytes() == b.tobytes() for a, b in zip(first, again))
    assert any(a.tobytes() != b.tobytes() for a, b in zip(first, other))


def test_one_env_per_device_twice_is_byte_identical():
    # One env per device is how a TPU steps it unbatched, its reset under a cond (rlpar.core.platform.one_env_step);
    # 128 steps of CartPole end several episodes, so the reset's branch runs.
    one = SMALL.replace(num_envs=1, total_timesteps=32 * 4)
    first, again = (agents.ppo.train(one, "CartPole-v1", devices=1, log_every=1) for _ in range(2))
    assert any("episode_return" in m for m in first.metrics)
    a, b = _leaves(first.state), _leaves(again.state)
    assert len(a) == len(b) and all(x.tobytes() == y.tobytes() for x, y in zip(a, b))


def test_a_short_ppo_run_learns_cartpole():
    # A random policy's episodes last about 22 steps; 100k steps of the preset's settings reach well past 100.
    config = PPOConfig.for_env("CartPole-v1").replace(num_envs=16, num_steps=128, total_timesteps=16 * 128 * 60,
                                                      lr=2.5e-3)
    result = agents.ppo.train(config, "CartPole-v1", devices=1, log_every=10)
    returns = [m["episode_return"] for m in result.metrics if "episode_return" in m]
    assert returns[-1] > 100 and returns[-1] > 3 * returns[0], returns


def test_a_users_own_env_trains_through_the_library():
    from tests.custom_envs import make_short_cartpole

    result = agents.ppo.train(SMALL, make_short_cartpole(20), devices=1, log_every=1)
    assert all(np.isfinite(x).all() for x in _leaves(result.params))
    lengths = [m["episode_length"] for m in result.metrics if "episode_length" in m]
    assert lengths and max(lengths) <= 20  # the user's 20-step time limit holds


def _argv(run_dir: Path, num_envs: int) -> list[str]:
    return ["ppo", "--env", "CartPole-v1", "--devices", "1", "--num-envs", str(num_envs), "--num-steps", "32",
            "--total-timesteps", str(num_envs * 32 * 4), "--num-minibatches", "2", "--update-epochs", "2",
            "--hidden-sizes", "32,32", "--log-every", "1", "--checkpoint-every", "2", "--eval-every", "0",
            "--no-compile-cache", "--run-dir", str(run_dir)]


def _final_state(run_dir: Path):
    checkpoints = Checkpoints(run_dir / rundir.CHECKPOINTS)
    return checkpoints.restore(checkpoints.latest()).state


@pytest.mark.parametrize("num_envs", [16, 1])  # 1: how a TPU steps one env (one_env_step)
def test_a_run_cut_after_a_checkpoint_resumes_bit_identically_and_evaluates(tmp_path, num_envs):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert train_cli.main(_argv(whole, num_envs)) == 0
    shutil.copytree(whole, cut)
    shutil.rmtree(cut / rundir.CHECKPOINTS / "4")  # as if stopped after update 3: the newest checkpoint is update 2
    assert Checkpoints(cut / rundir.CHECKPOINTS).committed_steps() == [2]
    assert train_cli.main(["--resume", str(cut)]) == 0
    a, b = _leaves(_final_state(whole)), _leaves(_final_state(cut))
    assert len(a) == len(b) and all(x.tobytes() == y.tobytes() for x, y in zip(a, b))
    result = evaluate(cut, episodes=3)
    assert result.returns.shape == (3,) and np.isfinite(result.returns).all()


def test_slot_zero_of_a_two_seed_program_updates_as_the_single_program_with_its_keys(monkeypatch):
    # The run of one seed and slot 0 of a run of two (vmapped) are the same algorithm: given the keys slot 0 folds
    # in, their first updates agree up to float rounding (1e-7 on a CPU). A difference of the order of the update
    # itself would mean the vmapped and the plain program compute differently on this backend. Breakout-MinAtar's
    # accelerator preset, smaller, its minibatches gathered in blocks of 8 rows as the preset's 512 envs are off
    # the CPU (rlpar.core.platform.shuffle_block), forced here on every backend. Matmuls at float32's precision: at
    # a TPU's default, float32 matmuls run as bf16 passes whose rounding differs between the vmapped and the plain
    # layouts (benchmarks/slot_parity.py: 6e-4 apart after one update there, within 6e-8 at "highest").
    import envs
    from agents import shuffle
    from rlpar.core import platform, seeds
    from rlpar.run.prepare import make_program_factory

    config = PPOConfig.for_env("Breakout-MinAtar", platform="tpu").replace(num_envs=64, num_steps=16)
    env, env_params = envs.make("Breakout-MinAtar")

    def program(num_seeds):
        slots = seeds.make_slots(num_seeds, "")
        return make_program_factory(agents.ppo.SPEC, config, slots, env, env_params, config.num_envs)(None)

    single, two = program(1), program(2)
    key_params, key_device = jax.random.split(jax.random.key(0))
    blocks = []  # the block each traced update takes
    block_size = shuffle.block_size
    monkeypatch.setattr(shuffle, "block_size", lambda *args: blocks.append(block_size(*args)) or blocks[-1])
    with platform.forcing(shuffle_block=8), jax.default_matmul_precision("highest"):  # traced inside: every jit
        start = jax.jit(single.init)(jax.random.fold_in(key_params, 0), jax.random.fold_in(key_device, 0))
        start_two = jax.jit(two.init)(key_params, key_device)
        one_after, _ = jax.jit(single.update)(start)
        two_after, _ = jax.jit(two.update)(start_two)
    assert blocks == [8, 8]  # the single program's update and the two-seed one's (its slots vmapped: one trace)
    before = _leaves(start.agent.params)
    for a, b in zip(before, _leaves(start_two.agent.params)):
        np.testing.assert_allclose(a, b[0], atol=1e-6)
    moved = max(float(np.abs(a - b).max()) for a, b in zip(_leaves(one_after.agent.params), before))
    apart = max(float(np.abs(a - b[0]).max())
                for a, b in zip(_leaves(one_after.agent.params), _leaves(two_after.agent.params)))
    print(f"backend {jax.default_backend()}: first update moved the parameters by up to {moved:.3g}; slot 0 and "
          f"the single program {apart:.3g} apart")
    assert moved > 1e-4 and apart < 0.01 * moved
