"""Generalised advantage estimation that keeps termination and truncation apart."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from rlpar.core.collectives import pmean


def gae(
    reward: jax.Array,
    value: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    final_value: jax.Array,
    last_value: jax.Array,
    gamma: float,
    gae_lambda: float,
) -> tuple[jax.Array, jax.Array]:
    """GAE(lambda) over a time-major batch.

    Shapes: ``reward, value, terminated, truncated, final_value`` are ``[T, B]``; ``last_value`` is ``[B]``, the
    value of the observation after the last step.

    With ``V_{t+1}`` the value of the next observation (``value[t+1]``, or ``last_value`` at ``t = T-1``)::

        next_t  = 0             if terminated_t       (no future)
                = final_value_t if truncated_t        (time limit: bootstrap from V(final observation);
                                                        V_{t+1} belongs to the next episode)
                = V_{t+1}       otherwise
        delta_t = reward_t + gamma * next_t - value_t
        A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},   done_t = terminated_t or truncated_t

    Returns ``(advantages, returns)``, both ``[T, B]``, with ``returns = advantages + value`` (the critic target).
    """
    chex.assert_rank([reward, value, terminated, truncated, final_value, last_value], [2, 2, 2, 2, 2, 1])
    chex.assert_equal_shape([reward, value, terminated, truncated, final_value])
    terminated = terminated.astype(jnp.float32)
    truncated = jnp.logical_and(truncated, terminated == 0).astype(jnp.float32)
    next_value = jnp.concatenate([value[1:], last_value[None]], axis=0)
    next_value = truncated * final_value + (1.0 - truncated) * next_value
    delta = reward + gamma * (1.0 - terminated) * next_value - value
    continues = 1.0 - jnp.maximum(terminated, truncated)

    def backward(adv_next, inputs):
        delta_t, continues_t = inputs
        adv_t = delta_t + gamma * gae_lambda * continues_t * adv_next
        return adv_t, adv_t

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(last_value), (delta, continues), reverse=True)
    return advantages, advantages + value


def moments(x: jax.Array, axis_name: str | None, axis: int | None = None) -> jax.Array:
    """``[..., 2]``: the mean of ``x`` and the mean of its squares over ``axis`` (all elements when ``None``),
    pmean-ed over ``axis_name`` in one collective; with equal per-device sizes, the moments of the concatenated
    batch. Stacking many (e.g. one pair per minibatch of a whole update) still costs one collective."""
    return pmean(jnp.stack([jnp.mean(x, axis=axis), jnp.mean(jnp.square(x), axis=axis)], axis=-1), axis_name)


def normalize_with(x: jax.Array, x_moments: jax.Array, eps: float = 1e-8) -> jax.Array:
    """``(x - mean) / (std + eps)`` with ``x_moments = [mean, mean of squares]`` from ``moments``."""
    mean, mean_sq = x_moments[..., 0], x_moments[..., 1]
    std = jnp.sqrt(jnp.maximum(mean_sq - jnp.square(mean), 0.0))
    return (x - mean) / (std + eps)


def normalize(x: jax.Array, axis_name: str | None, eps: float = 1e-8) -> jax.Array:
    """``(x - mean) / (std + eps)`` with mean and std over all elements on all devices.

    Statistics are pmean-ed over ``axis_name``, so with equal per-device sizes the result equals normalising the
    concatenated batch on one device.
    """
    return normalize_with(x, moments(x, axis_name), eps)
