"""The XLA:CPU fast paths and the plain flax/optax paths (agents.platform) give the same networks and updates."""

import jax
import jax.numpy as jnp
import numpy as np

import envs
from agents import platform, shuffle
from agents.networks import ActorCritic, make_network
from agents.ppo import PPOConfig, make_ppo
from tests.helpers import random_batch


def _fit(fast: bool):
    env, env_params = envs.make("CartPole-v1")
    config = PPOConfig(num_envs=4, num_steps=16, num_minibatches=2, update_epochs=2)
    # the same permutations on both (the plain path's own choice is the sort: agents.shuffle.method)
    with platform.fast_paths(fast), shuffle.using("feistel"):
        ppo = make_ppo(config, env, env_params, 4)
        state = ppo.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
        batch = random_batch(jax.random.PRNGKey(2), 64)
        params, opt_state, _ = jax.jit(ppo.fit)(state.params, state.opt_state, batch, jax.random.PRNGKey(3))
    return state, params, opt_state


def test_ppo_update_is_the_same_on_both_paths():
    start, fast_params, fast_opt = _fit(True)
    _, plain_params, plain_opt = _fit(False)
    # Same parameter tree and optimizer state tree (checkpoints load either way), and the same update.
    assert jax.tree.structure(fast_params) == jax.tree.structure(plain_params) == jax.tree.structure(start.params)
    assert jax.tree.structure(fast_opt) == jax.tree.structure(plain_opt)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), fast_params, plain_params)
    moved = jax.tree.leaves(jax.tree.map(lambda a, b: float(np.abs(a - b).max()), fast_params, start.params))
    assert max(moved) > 1e-4  # the update did something


def test_image_actor_critic_agrees_on_both_paths_and_supports_jvp_on_the_plain_path():
    obs_space = type("Box", (), {"shape": (10, 10, 4)})()
    net = make_network(obs_space, type("Discrete", (), {"n": 3})(), (32,), "relu")
    x = jax.random.uniform(jax.random.PRNGKey(0), (5, 10, 10, 4))
    params = net.init(jax.random.PRNGKey(1), x)

    def loss(p, fast):
        with platform.fast_paths(fast):
            logits, value = net.apply(p, x)
        return jnp.sum(jnp.tanh(logits)) + jnp.sum(value)

    np.testing.assert_allclose(loss(params, True), loss(params, False), rtol=1e-5)
    g_fast, g_plain = jax.grad(loss)(params, True), jax.grad(loss)(params, False)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), g_fast, g_plain)
    tangent = jax.tree.map(jnp.ones_like, params)
    _, directional = jax.jvp(lambda p: loss(p, False), (params,), (tangent,))  # custom_vjp would refuse this
    expected = sum(jnp.sum(g) for g in jax.tree.leaves(g_plain))
    np.testing.assert_allclose(directional, expected, rtol=1e-4)
    assert isinstance(net, ActorCritic)
