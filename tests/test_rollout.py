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


def test_truncated_values_compact_and_fallback_agree():
    # final_obs[t, b] = [10 t + b]; value_fn = obs + 0.5, so V = 10 t + b + 0.5 where truncated, 0 elsewhere.
    final_obs = (10.0 * jnp.arange(3)[:, None] + jnp.arange(2)[None, :])[..., None]  # [T=3, B=2, 1]
    value_fn = lambda p, obs: obs[:, 0] + 0.5
    few = jnp.array([[False, True], [False, False], [True, False]])  # 2 <= B truncations: compacted batch
    many = jnp.array([[True, True], [False, True], [True, False]])  # 4 > B: every row is evaluated
    np.testing.assert_array_equal(rollout.truncated_values(value_fn, None, final_obs, few),
                                  [[0.0, 1.5], [0.0, 0.0], [20.5, 0.0]])
    np.testing.assert_array_equal(rollout.truncated_values(value_fn, None, final_obs, many),
                                  [[0.5, 1.5], [0.0, 11.5], [20.5, 0.0]])
    # only row 0 truncated: the padding of the compacted batch repeats row 0 and must not add its value again
    first = jnp.zeros((3, 2), bool).at[0, 0].set(True)
    np.testing.assert_array_equal(rollout.truncated_values(value_fn, None, final_obs, first),
                                  [[0.5, 0.0], [0.0, 0.0], [0.0, 0.0]])


def test_truncated_values_when_the_first_row_is_truncated():
    # Only flat row 0 (t=0, b=0) is truncated: its value must appear once, even though the compacted batch pads
    # with copies of row 0.
    final_obs = jnp.arange(9.0).reshape(3, 3, 1)
    truncated = jnp.zeros((3, 3), bool).at[0, 0].set(True)
    values = rollout.truncated_values(lambda p, o: 100.0 + o[:, 0], None, final_obs, truncated)
    expected = np.zeros((3, 3))
    expected[0, 0] = 100.0
    np.testing.assert_allclose(np.asarray(values), expected)
    # and the fallback path (more truncated steps than envs) gives the same values where truncated
    many = jnp.ones((3, 3), bool)
    np.testing.assert_allclose(np.asarray(rollout.truncated_values(lambda p, o: 100.0 + o[:, 0], None, final_obs,
                                                                   many)), 100.0 + np.arange(9.0).reshape(3, 3))
