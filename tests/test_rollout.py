import jax
import jax.numpy as jnp
import numpy as np

import envs
from rlpar import rollout


def _constant_policy(value_of_obs):
    def policy_fn(params, obs, key):
        b = obs.shape[0]
        return jnp.zeros(b, jnp.int32), jnp.zeros(b), value_of_obs(obs)

    return policy_fn


def test_collector_shapes_and_truncation_bootstrap_value():
    # Probe-Truncated-v0 is cut every 5 steps; a value function "100 + obs" lets us see which obs was evaluated.
    env, params = envs.make("Probe-Truncated-v0")
    value_fn = lambda p, obs: 100.0 + obs[:, 0]
    collect = rollout.make_collector(env, params, _constant_policy(lambda o: o[:, 0]), value_fn, num_steps=12)
    state = rollout.reset(env, params, jax.random.PRNGKey(0), num_envs=3)
    state, traj = jax.jit(collect)(None, state)
    assert traj.obs.shape == (12, 3, 1) and traj.reward.shape == (12, 3)
    truncated = np.asarray(traj.truncated)
    # steps 5 and 10 of each env (indices 4, 9) are truncations; nothing terminates
    np.testing.assert_array_equal(truncated, np.isin(np.arange(12), [4, 9])[:, None].repeat(3, 1))
    assert not np.asarray(traj.terminated).any()
    np.testing.assert_allclose(np.asarray(traj.final_value), np.where(truncated, 100.0, 0.0))
    np.testing.assert_array_equal(np.asarray(traj.episode_done), truncated)
    assert state.obs.shape == (3, 1)


def test_collector_terminations_have_no_bootstrap_value():
    env, params = envs.make("Probe-OneStep-v0")
    collect = rollout.make_collector(env, params, _constant_policy(lambda o: o[:, 0]), lambda p, o: 1.0 + o[:, 0], 4)
    _, traj = collect(None, rollout.reset(env, params, jax.random.PRNGKey(0), 2))
    assert np.asarray(traj.terminated).all() and not np.asarray(traj.truncated).any()
    np.testing.assert_array_equal(np.asarray(traj.final_value), 0.0)


def test_collector_is_deterministic_and_envs_differ():
    env, params = envs.make("CartPole-v1")
    policy_fn = lambda p, obs, key: (jax.random.randint(key, obs.shape[:1], 0, 2), jnp.zeros(obs.shape[0]),
                                     jnp.zeros(obs.shape[0]))
    collect = jax.jit(rollout.make_collector(env, params, policy_fn, lambda p, o: jnp.zeros(o.shape[0]), 50))
    s0 = rollout.reset(env, params, jax.random.PRNGKey(3), 4)
    _, a = collect(None, s0)
    _, b = collect(None, s0)
    np.testing.assert_array_equal(a.obs, b.obs)
    assert not np.allclose(a.obs[:, 0], a.obs[:, 1])  # independent envs
