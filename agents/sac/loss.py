"""SAC's math as pure functions of arrays: the tanh-squashed Gaussian and its log-density, soft TD targets.

Shapes: ``[..., d]`` for actions and their pre-squash values ``u``, ``[...]`` for per-sample scalars (the action
dimension summed out).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np

_LOG_2PI = float(np.log(2.0 * np.pi))


def gaussian_log_prob(u: jax.Array, mean: jax.Array, log_std: jax.Array) -> jax.Array:
    """``log N(u; mean, exp(log_std)^2)`` of a diagonal Gaussian, summed over the last axis: ``[..., d] -> [...]``.
    E.g. ``u = mean``, ``log_std = 0``, ``d = 1``: ``-0.5 * log(2 pi) = -0.9189``."""
    z = (u - mean) * jnp.exp(-log_std)
    return jnp.sum(-0.5 * jnp.square(z) - log_std - 0.5 * _LOG_2PI, axis=-1)


def tanh_log_det(u: jax.Array) -> jax.Array:
    """``sum log(1 - tanh(u)^2)`` over the last axis, ``[..., d] -> [...]``: the log-Jacobian of ``a = tanh(u)``.

    Written ``2 * (log 2 - u - softplus(-2 u))``, which is exact and stays finite where ``tanh(u)`` rounds to +-1.
    E.g. ``u = 0``: 0; ``u = atanh(0.6)``: ``log(0.64) = -0.4463``.
    """
    return jnp.sum(2.0 * (jnp.log(2.0) - u - jax.nn.softplus(-2.0 * u)), axis=-1)


def squashed_gaussian_log_prob(u: jax.Array, mean: jax.Array, log_std: jax.Array, log_scale: jax.Array) -> jax.Array:
    """Log-density ``[...]`` of the action ``low + (tanh(u) + 1) * scale`` for ``u ~ N(mean, exp(log_std)^2)``:

    ``log N(u) - sum log(1 - tanh(u)^2) - sum log(scale)``, with ``scale = (high - low) / 2`` per dimension
    (``log_scale [d]``): the density of the action in the env's own units (a change of variables through the tanh
    and the affine map onto ``[low, high]``).
    """
    chex.assert_equal_shape([u, mean, log_std])
    return gaussian_log_prob(u, mean, log_std) - tanh_log_det(u) - jnp.sum(log_scale)


def squashed_gaussian(noise: jax.Array, mean: jax.Array, log_std: jax.Array, log_scale: jax.Array
                      ) -> tuple[jax.Array, jax.Array]:
    """``(tanh(u) [..., d] in (-1, 1), its log-density [...])`` for ``u = mean + exp(log_std) * noise``, with
    ``noise ~ N(0, 1)`` drawn by the caller: a sample of the squashed Gaussian, differentiable in ``mean`` and
    ``log_std`` (reparameterised)."""
    u = mean + jnp.exp(log_std) * noise
    return jnp.tanh(u), squashed_gaussian_log_prob(u, mean, log_std, log_scale)


def soft_q_targets(reward: jax.Array, terminated: jax.Array, q_next: jax.Array, log_prob_next: jax.Array, alpha,
                   gamma) -> jax.Array:
    """Soft TD targets ``[N]``: ``r + gamma * (1 - terminated) * (Q_target(s', a') - alpha * log pi(a' | s'))`` with
    ``a' ~ pi(s')`` and ``Q_target`` the smaller of the two target critics. A terminated step has no future; a
    truncated one does (its ``s'`` is the observation the episode was cut at)."""
    chex.assert_rank([reward, terminated, q_next, log_prob_next], 1)
    return reward + gamma * (1.0 - terminated.astype(reward.dtype)) * (q_next - alpha * log_prob_next)
