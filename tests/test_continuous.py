"""Continuous actions: a diagonal Gaussian policy with a learned log-std; Pendulum learns."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
import envs
from agents.ppo import PPOConfig, make_ppo
from rlpar.run.records import mean_recent_return


def test_gaussian_policy_shapes_and_learned_log_std():
    env, env_params = envs.make("Reacher-misc")  # 2-d actions
    ppo = make_ppo(PPOConfig(), env, env_params, 4)
    params = ppo.network.init(jax.random.PRNGKey(0), jnp.zeros((1, 8)))
    np.testing.assert_array_equal(params["params"]["log_std"], [0.0, 0.0])  # std 1 at the start
    pi, value = ppo.network.apply(params, jnp.ones((5, 8)), method=type(ppo.network).distribution)
    action = pi.sample(seed=jax.random.PRNGKey(1))
    assert action.shape == (5, 2) and pi.log_prob(action).shape == (5,) and value.shape == (5,)
    # entropy of N(mu, 1) in 2-d: 2 * 0.5 * log(2 pi e)
    np.testing.assert_allclose(pi.entropy(), np.log(2 * np.pi * np.e), rtol=1e-5)
    state = ppo.init(jax.random.PRNGKey(0), jax.random.PRNGKey(2)).replace(params=params)
    greedy, _ = ppo.policy(state, True)((), jnp.ones((5, 8)), None)
    np.testing.assert_allclose(greedy, pi.mean(), rtol=1e-6)


def test_log_std_is_trained():
    config = PPOConfig(num_envs=4, num_steps=32, total_timesteps=4 * 32 * 3, num_minibatches=2)
    result = agents.ppo.train(config, "Pendulum-v1", devices=2, log_every=3)
    assert not np.allclose(result.params["params"]["log_std"], 0.0)


@pytest.mark.slow
@pytest.mark.full_optimization  # a learning run: compiled as a user's, its run long enough to pay
def test_pendulum_learns_with_its_preset():
    # Measured with this preset (400k steps): about -175; a uniformly random policy scores about -1195.
    result = agents.ppo.train(PPOConfig.for_env("Pendulum-v1"), "Pendulum-v1", devices=1)
    assert mean_recent_return(result.metrics) > -300

