import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs


def test_make_returns_wrapped_env_and_params():
    env, params = envs.make("CartPole-v1")
    assert env.action_space(params).n == 2
    assert env.observation_space(params).shape == (4,)
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    out = env.step(jax.random.PRNGKey(1), state, 0, params)
    assert len(out) == 6  # gymnax 1.0: obs, state, reward, terminated, truncated, info
    assert {"final_observation", "episode_return", "episode_length", "episode_done"} <= set(out[5])


def test_unknown_env_lists_close_matches():
    with pytest.raises(ValueError, match=r"unknown env 'Cartpole-v1'.*'CartPole-v1'"):
        envs.make("Cartpole-v1")


def test_flatten_observation_flattens_images_and_final_observation():
    env, params = envs.make("Breakout-MinAtar", flatten=True)
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    assert obs.shape == (10 * 10 * 4,) and obs.dtype == jnp.float32
    obs, _, _, _, _, info = env.step(jax.random.PRNGKey(1), state, 0, params)
    assert info["final_observation"].shape == (400,)
    raw, raw_params = envs.make("Breakout-MinAtar")  # default: images keep their shape for the CNN
    assert raw.reset(jax.random.PRNGKey(0), raw_params)[0].shape == (10, 10, 4)


def test_discrete_observation_becomes_one_hot():
    env, params = envs.make("FrozenLake-misc")
    obs, _ = env.reset(jax.random.PRNGKey(0), params)
    assert obs.shape == env.observation_space(params).shape and float(obs.sum()) == 1.0


def test_box_actions_are_clipped_and_rescaled():
    # Pendulum's torque is in [-2, 2]; the agent acts in [-1, 1]: 0.5 -> 1.0, 7 -> clipped to 1 -> 2.0.
    env, params = envs.make("Pendulum-v1")
    space = env.action_space(params)
    assert (float(space.low), float(space.high)) == (-1.0, 1.0)
    rescale = env._env._rescale  # EpisodeStatistics(FlattenObservation(RescaleAction(Pendulum)))
    np.testing.assert_allclose(rescale(jnp.array([0.5]), params), [1.0])
    np.testing.assert_allclose(rescale(jnp.array([7.0]), params), [2.0])
    np.testing.assert_allclose(rescale(jnp.array([-1.0]), params), [-2.0])


def test_episode_statistics_on_truncating_probe():
    # Probe-Truncated-v0: reward 1 per step, cut at 5 steps. Episodes end at steps 5 and 10 with return 5, length 5.
    env, params = envs.make("Probe-Truncated-v0")
    _, state = env.reset(jax.random.PRNGKey(0), params)
    done_at, returns, lengths = [], [], []
    for t in range(1, 11):
        _, state, reward, terminated, truncated, info = env.step(jax.random.PRNGKey(t), state, 0, params)
        assert not terminated
        if info["episode_done"]:
            assert truncated
            done_at.append(t)
            returns.append(float(info["episode_return"]))
            lengths.append(int(info["episode_length"]))
    assert done_at == [5, 10]
    assert returns == [5.0, 5.0] and lengths == [5, 5]


def test_episode_statistics_on_terminating_env_under_vmap():
    env, params = envs.make("Probe-OneStep-v0")
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, jnp.zeros(3, jnp.int32), params)
    _, state, reward, terminated, truncated, info = out
    np.testing.assert_array_equal(terminated, [True] * 3)
    np.testing.assert_array_equal(truncated, [False] * 3)
    np.testing.assert_array_equal(info["episode_return"], [1.0] * 3)
    np.testing.assert_array_equal(state.episode_return, [0.0] * 3)  # reset after the episode ended


def test_env_ids_include_gymnax_and_probes():
    ids = envs.env_ids()
    assert "CartPole-v1" in ids and "Probe-Truncated-v0" in ids


def test_making_a_gymnax_env_defers_its_plotting_libraries_until_used():
    """gymnax imports seaborn and matplotlib.pyplot for rendering only; envs.make leaves them unloaded (start-up
    time), and they still work when used afterwards, through gymnax's own references too."""
    code = (
        "import sys, envs\n"
        "envs.make('CartPole-v1')\n"
        "print('scipy' in sys.modules, 'pandas' in sys.modules)\n"
        "import matplotlib.pyplot as plt, seaborn as sns\n"
        "from gymnax.environments.misc import pong\n"
        "print(type(plt.figure()).__name__, len(sns.color_palette('cubehelix', 3)), pong.sns.color_palette is not None)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True).stdout
    assert out.split() == ["False", "False", "Figure", "3", "True"]
