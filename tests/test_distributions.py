"""agents.distributions against numbers by hand and against distrax (an independent implementation, in the test
extra): same log-probabilities, entropies and modes, and the same draws from the same key."""

import math

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.distributions import Categorical, DiagonalGaussian
from agents.networks import ActorCritic, policy


def test_categorical_by_hand():
    pi = Categorical.of(jnp.log(jnp.array([[0.25, 0.75], [0.5, 0.5]])) + 3.0)  # shifted logits: same distribution
    np.testing.assert_allclose(pi.log_prob(jnp.array([1, 0])), [math.log(0.75), math.log(0.5)], rtol=1e-6)
    np.testing.assert_allclose(pi.entropy(), [-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), math.log(2)],
                               rtol=1e-6)
    np.testing.assert_array_equal(pi.mode(), [1, 0])
    np.testing.assert_allclose(pi.probs(), [[0.25, 0.75], [0.5, 0.5]], rtol=1e-6)


def test_categorical_draws_follow_the_probabilities():
    pi = Categorical.of(jnp.log(jnp.broadcast_to(jnp.array([0.1, 0.2, 0.7]), (100_000, 3))))
    counts = np.bincount(np.asarray(pi.sample(seed=jax.random.PRNGKey(0))), minlength=3)
    expected = 100_000 * np.array([0.1, 0.2, 0.7])
    assert np.sum((counts - expected) ** 2 / expected) < 13.8  # chi-square, 2 degrees of freedom: p = 0.001


@pytest.mark.parametrize("masked", [False, True])
def test_categorical_is_distraxs(masked):
    logits = jax.random.normal(jax.random.PRNGKey(1), (64, 5)) * 3
    if masked:  # the team agents' unavailable actions (agents/team/network.py: MASKED_LOGIT)
        logits = logits.at[:, 1].set(-1e9)
    ours, theirs = policy(logits), distrax.Categorical(logits=logits)
    actions = jnp.arange(64) % 5
    np.testing.assert_array_equal(ours.log_prob(actions), theirs.log_prob(actions))
    np.testing.assert_allclose(ours.entropy(), theirs.entropy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(ours.mode(), theirs.mode())
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        np.testing.assert_array_equal(ours.sample(seed=key), theirs.sample(seed=key))
    assert np.isfinite(np.asarray(ours.entropy())).all()
    grad = jax.grad(lambda x: jnp.sum(policy(x).log_prob(actions) + policy(x).entropy()))(logits)
    want = jax.grad(lambda x: jnp.sum(distrax.Categorical(logits=x).log_prob(actions)
                                      + distrax.Categorical(logits=x).entropy()))(logits)
    np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-6)


def test_gaussian_by_hand():
    pi = DiagonalGaussian(jnp.array([[0.0, 1.0]]), jnp.array([[1.0, 2.0]]))
    # at the mean: -log(2 pi) / 2 per dimension, less log(scale)
    np.testing.assert_allclose(pi.log_prob(jnp.array([[0.0, 1.0]])), [-math.log(2 * math.pi) - math.log(2.0)],
                               rtol=1e-6)
    np.testing.assert_allclose(pi.log_prob(jnp.array([[1.0, 3.0]])), [-math.log(2 * math.pi) - math.log(2.0) - 1.0],
                               rtol=1e-6)  # one sd away in each dimension: -1/2 each
    np.testing.assert_allclose(pi.entropy(), [1 + math.log(2 * math.pi) + math.log(2.0)], rtol=1e-6)
    np.testing.assert_array_equal(pi.mode(), [[0.0, 1.0]])


def test_gaussian_is_distraxs():
    k = jax.random.split(jax.random.PRNGKey(2), 3)
    loc, scale = jax.random.normal(k[0], (32, 3)), jnp.exp(jax.random.normal(k[1], (32, 3)))
    ours, theirs = DiagonalGaussian(loc, scale), distrax.MultivariateNormalDiag(loc, scale)
    x = jax.random.normal(k[2], (32, 3)) * 2
    np.testing.assert_allclose(ours.log_prob(x), theirs.log_prob(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.entropy(), theirs.entropy(), rtol=1e-6)
    key = jax.random.PRNGKey(3)
    np.testing.assert_allclose(ours.sample(seed=key), theirs.sample(seed=key), rtol=1e-6, atol=1e-6)
    draws = DiagonalGaussian(jnp.zeros((50_000, 1)) + 2.0, jnp.full((50_000, 1), 0.5)).sample(seed=key)
    assert abs(float(jnp.mean(draws)) - 2.0) < 0.01 and abs(float(jnp.std(draws)) - 0.5) < 0.01  # 4 and 3 sd


def test_a_policy_can_leave_a_traced_function():
    net = ActorCritic(action_dim=2, continuous=True)
    params = net.init(jax.random.PRNGKey(0), jnp.zeros((1, 3)))
    pi, _ = jax.jit(lambda p, o: net.apply(p, o, method=ActorCritic.distribution))(params, jnp.ones((4, 3)))
    assert isinstance(pi, DiagonalGaussian) and pi.loc.shape == (4, 2) and pi.scale.shape == (4, 2)
