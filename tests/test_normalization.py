import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
from agents.normalization import init_stats, normalize_obs, update_stats
from agents.ppo import PPOConfig
from rlpar.core import hosts, parallel


def test_update_stats_hand_worked():
    # Start: mean 0, var 1, count 1e-4 (negligible). Batch [1, 3]: mean 2, var 1 -> after merge mean ~2, var ~1.
    # A second batch [5, 7] (mean 6, var 1): total 4 samples [1, 3, 5, 7]: mean 4, population var 5.
    stats = update_stats(init_stats(()), jnp.array([1.0, 3.0]), None)
    np.testing.assert_allclose([stats.mean, stats.var], [2.0, 1.0], atol=1e-3)
    stats = update_stats(stats, jnp.array([5.0, 7.0]), None)
    np.testing.assert_allclose([stats.mean, stats.var, stats.count], [4.0, 5.0, 4.0], atol=1e-3)
    np.testing.assert_allclose(normalize_obs(stats, jnp.array(4.0 + np.sqrt(5.0))), 1.0, atol=1e-3)


def test_stats_identical_across_devices_and_equal_to_concatenated_batch():
    devices = hosts.select_devices(4)
    batch = jax.random.normal(jax.random.PRNGKey(0), (4, 32, 3)) * jnp.array([1.0, 5.0, 0.1]) + jnp.array([2, -1, 7])
    stats = init_stats((3,))
    for _ in range(2):  # two updates: the merge, not only the first batch
        stats_many = jax.pmap(lambda s, b: update_stats(s, b, parallel.AXIS_NAME), axis_name=parallel.AXIS_NAME,
                              in_axes=(None, 0), devices=devices)(stats, batch)
        stats_one = update_stats(stats, batch.reshape(128, 3), None)
        copies = parallel.replicas(stats_many)
        for other in copies[1:]:
            jax.tree.map(np.testing.assert_array_equal, copies[0], other)  # bit-identical on every device
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), copies[0], stats_one)
        stats = stats_one
        batch = batch * 2.0 + 1.0
    np.testing.assert_allclose(stats.count, 256.0, rtol=1e-5)


def test_training_with_obs_normalization_keeps_stats_identical_across_devices():
    config = PPOConfig(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3, num_minibatches=2, update_epochs=1,
                       normalize_obs=True)
    result = agents.ppo.train(config, "CartPole-v1", devices=4, log_every=3)
    copies = parallel.replicas(result.state.agent.obs_stats)
    for other in copies[1:]:
        jax.tree.map(np.testing.assert_array_equal, copies[0], other)
    assert float(copies[0].count) == pytest.approx(3 * 64, rel=1e-3)
    assert not np.allclose(copies[0].mean, 0.0)
