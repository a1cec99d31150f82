"""Generalised advantage estimation that keeps termination and truncation apart."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

from rlpar.core import platform
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
    The recursion runs as ``rlpar.core.platform.gae_method()`` says (``backward_sums``).
    """
    chex.assert_rank([reward, value, terminated, truncated, final_value, last_value], [2, 2, 2, 2, 2, 1])
    chex.assert_equal_shape([reward, value, terminated, truncated, final_value])
    terminated = terminated.astype(jnp.float32)
    truncated = jnp.logical_and(truncated, terminated == 0).astype(jnp.float32)
    next_value = jnp.concatenate([value[1:], last_value[None]], axis=0)
    next_value = truncated * final_value + (1.0 - truncated) * next_value
    delta = reward + gamma * (1.0 - terminated) * next_value - value
    continues = 1.0 - jnp.maximum(terminated, truncated)
    advantages = backward_sums(delta, gamma * gae_lambda * continues)
    return advantages, advantages + value


def backward_sums(x: jax.Array, decay: jax.Array, method: str | None = None) -> jax.Array:
    """``y [T, ...]`` with ``y_t = x_t + decay_t * y_{t+1}`` and ``y_T = 0``, for ``x, decay [T, ...]``.

    ``method`` (default ``rlpar.core.platform.gae_method()``): ``"scan"``, ``T`` steps of ``lax.scan`` backwards;
    ``"associative"``, ``lax.associative_scan`` over the affine maps ``f_t(y) = decay_t * y + x_t``, whose
    composition is again affine (``f_s(f_t(y)) = decay_s decay_t y + decay_s x_t + x_s``), so ``y_t = f_t(f_{t+1}(...
    f_{T-1}(0)))`` takes ``log2 T`` rounds of whole-array operations instead of ``T`` dependent steps. The two agree up
    to float rounding (the sums are added in another order)."""
    chex.assert_equal_shape([x, decay])
    method = platform.gae_method() if method is None else method
    if method == "associative":
        def compose(later, earlier):  # reverse=True: the first argument holds the later steps
            return later[0] * earlier[0], earlier[0] * later[1] + earlier[1]

        return jax.lax.associative_scan(compose, (decay, x), reverse=True)[1]
    if method != "scan":
        raise ValueError(f"backward_sums method {method!r}: expected scan or associative")

    def backward(y_next, inputs):
        x_t, decay_t = inputs
        y_t = x_t + decay_t * y_next
        return y_t, y_t

    return jax.lax.scan(backward, jnp.zeros_like(x[0]), (x, decay), reverse=True)[1]


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
