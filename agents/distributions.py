"""The policies' action distributions: a categorical over logits and a Gaussian with a diagonal covariance.

Only what the agents ask of a policy: ``sample(seed=key)``, ``log_prob(action)``, ``entropy()`` and ``mode()`` (and
``probs()``, ``mean()``), with the batch in the leading axes and the categories (or the action's dimensions) in the
last. They are pytrees (``flax.struct``), so a traced function may return one.

Why not distrax: its import pulls in TensorFlow Probability's JAX substrate, about half a second of every run's start,
and since the agents build their policy while the update program is traced, that half second fell inside the compile
the command line reports. The arithmetic follows distrax's (``tests/test_distributions.py`` checks these against its
``Categorical`` and ``MultivariateNormalDiag``): log-softmax-normalised logits whose log-probability is read with a
one-hot (exact: every other term is zero) and whose draws are ``jax.random.categorical``'s Gumbel-max on those
logits, a Gaussian draw ``loc + scale * normal(key)``; so the same key draws the same actions, and log-probabilities
are bit-equal. The categorical entropy differs in the last bit (distrax normalises the logits once more there), so a
PPO run is not bit-identical to one of rlpar with distrax: parameters differ by rounding from the first update, and
a CartPole run's returns drifted apart after 30 updates (as any change of rounding makes them).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

_HALF_LOG_TWO_PI = 0.5 * math.log(2 * math.pi)


@struct.dataclass
class Categorical:
    """A categorical distribution per batch element; ``logits [..., num_categories]`` need not be normalised."""

    logits: jax.Array  # log-probabilities (normalised at construction: ``Categorical.of``)

    @classmethod
    def of(cls, logits: jax.Array) -> "Categorical":
        return cls(jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1))

    def sample(self, *, seed: jax.Array) -> jax.Array:
        return jax.random.categorical(seed, self.logits, axis=-1)

    def log_prob(self, value: jax.Array) -> jax.Array:
        one_hot = jax.nn.one_hot(value, self.logits.shape[-1], dtype=self.logits.dtype)
        return jnp.sum(self.logits * one_hot, axis=-1)

    def entropy(self) -> jax.Array:
        # p log p, taken as 0 where p is 0 (a masked action's logit): exp(-inf) * -inf would be nan
        p_log_p = jnp.where(self.logits > -jnp.inf, jnp.exp(self.logits) * self.logits, 0.0)
        return -jnp.sum(p_log_p, axis=-1)

    def mode(self) -> jax.Array:
        return jnp.argmax(self.logits, axis=-1)

    def probs(self) -> jax.Array:
        return jnp.exp(self.logits)


@struct.dataclass
class DiagonalGaussian:
    """A Gaussian over the last axis with independent dimensions: mean ``loc``, standard deviation ``scale``."""

    loc: jax.Array
    scale: jax.Array

    def sample(self, *, seed: jax.Array) -> jax.Array:
        return self.loc + self.scale * jax.random.normal(seed, self.loc.shape, self.loc.dtype)

    def log_prob(self, value: jax.Array) -> jax.Array:
        z = (value - self.loc) / self.scale
        return jnp.sum(-0.5 * jnp.square(z) - jnp.log(self.scale) - _HALF_LOG_TWO_PI, axis=-1)

    def entropy(self) -> jax.Array:
        return jnp.sum(0.5 + _HALF_LOG_TWO_PI + jnp.log(self.scale), axis=-1)

    def mode(self) -> jax.Array:
        return self.loc

    def mean(self) -> jax.Array:
        return self.loc
