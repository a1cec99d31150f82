"""PPO on probe environments whose right answers are known (see envs/probes.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
import envs
from agents.ppo import PPOConfig, make_ppo

PROBE_CONFIG = PPOConfig(
    num_envs=8, num_steps=16, total_timesteps=8 * 16 * 150, lr=3e-3, anneal_lr=False, clip_value=False,
    update_epochs=4, num_minibatches=2, ent_coef=0.0,
)


def _train(env_id, config=PROBE_CONFIG, devices=2):
    result = agents.ppo.train(config, env_id, devices=devices, log_every=50)
    env, env_params = envs.make(env_id)
    ppo = make_ppo(config, env, env_params, 1)
    return result, ppo


def _value(ppo, params, obs):
    return np.asarray(ppo.network.apply(params, jnp.asarray(obs, jnp.float32), method=type(ppo.network).value))


def test_one_step_reward_has_value_one():
    result, ppo = _train("Probe-OneStep-v0")
    assert _value(ppo, result.params, [[0.0]])[0] == pytest.approx(1.0, abs=0.05)


def test_value_depends_on_observation():
    result, ppo = _train("Probe-ObsReward-v0")
    np.testing.assert_allclose(_value(ppo, result.params, [[1.0], [-1.0]]), [1.0, -1.0], atol=0.1)


def test_truncation_bootstraps_to_infinite_horizon_value():
    # Reward 1 forever, cut at 5 steps by a time limit, constant observation. gamma = 0.9:
    # bootstrapping through truncation gives V = 1 / (1 - 0.9) = 10; reading the time limit as termination would fit
    # the mean truncated return, about (4.10 + 3.44 + 2.71 + 1.9 + 1) / 5 = 2.6.
    config = PROBE_CONFIG.replace(gamma=0.9, total_timesteps=8 * 16 * 300)
    result, ppo = _train("Probe-Truncated-v0", config)
    assert _value(ppo, result.params, [[0.0]])[0] == pytest.approx(10.0, abs=0.5)


def test_policy_learns_the_rewarded_action():
    result, ppo = _train("Probe-Policy-v0", PROBE_CONFIG.replace(ent_coef=0.0))
    state = ppo.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1)).replace(params=result.params)
    actions, _ = ppo.policy(state, True)((), jnp.array([[1.0], [-1.0]]), None)  # the greedy policy export
    actions = np.asarray(actions)
    np.testing.assert_array_equal(actions, [1, 0])
    assert result.metrics[-1]["episode_return"] > 0.95


@pytest.mark.slow  # moved out of the default run for its length; CI runs the slow set too
def test_the_accelerators_layout_learns_the_probes(monkeypatch):
    """What a GPU or TPU runs (agents.platform's plain layers, agents.shuffle's sorted permutation of blocks of rows
    of one step), forced on this CPU: the value and the policy reach the probes' known answers."""
    from agents import shuffle

    monkeypatch.setenv("RLPAR_PLAIN_LAYERS", "1")
    with shuffle.using(None, 4):  # blocks of 4 of each device's 4 envs per step
        assert shuffle.method() == "sort" and shuffle.block_size(64, 4, 2) == 4
        result, ppo = _train("Probe-ObsReward-v0")
        np.testing.assert_allclose(_value(ppo, result.params, [[1.0], [-1.0]]), [1.0, -1.0], atol=0.1)
        result, ppo = _train("Probe-Policy-v0")
        assert result.metrics[-1]["episode_return"] > 0.95
