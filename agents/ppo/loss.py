"""The PPO objective as pure functions of arrays."""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp


class LossInfo(NamedTuple):
    total: jax.Array
    policy: jax.Array
    value: jax.Array
    entropy: jax.Array
    approx_kl: jax.Array
    clip_fraction: jax.Array


def clipped_surrogate(log_prob: jax.Array, old_log_prob: jax.Array, advantage: jax.Array, clip_eps: float):
    """Clipped policy loss (to minimise), shapes ``[N]``.

    ``ratio = exp(log_prob - old_log_prob)``;
    ``loss = -mean(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A))``.
    Returns ``(loss, approx_kl, clip_fraction)`` where ``approx_kl = mean((ratio - 1) - log ratio)``.
    """
    chex.assert_rank([log_prob, old_log_prob, advantage], 1)
    log_ratio = log_prob - old_log_prob
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantage
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantage
    loss = -jnp.mean(jnp.minimum(unclipped, clipped))
    approx_kl = jnp.mean((ratio - 1.0) - log_ratio)
    clip_fraction = jnp.mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32))
    return loss, approx_kl, clip_fraction


def value_loss(value: jax.Array, old_value: jax.Array, target: jax.Array, clip_eps: float | None):
    """Squared-error critic loss, shapes ``[N]``: ``0.5 * mean((V - target)^2)``.

    With ``clip_eps``, the new value may not move the loss down by more than ``clip_eps`` away from ``old_value``:
    ``0.5 * mean(max((V - target)^2, (old + clip(V - old, -eps, eps) - target)^2))``.
    """
    chex.assert_rank([value, old_value, target], 1)
    err = jnp.square(value - target)
    if clip_eps is None:
        return 0.5 * jnp.mean(err)
    clipped_value = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
    return 0.5 * jnp.mean(jnp.maximum(err, jnp.square(clipped_value - target)))


def ppo_loss(
    log_prob: jax.Array,
    entropy: jax.Array,
    value: jax.Array,
    old_log_prob: jax.Array,
    old_value: jax.Array,
    advantage: jax.Array,
    target: jax.Array,
    *,
    clip_eps: float,
    vf_clip_eps: float | None,
    vf_coef: float,
    ent_coef: float,
) -> tuple[jax.Array, LossInfo]:
    """``total = policy + vf_coef * value - ent_coef * mean(entropy)``, all inputs ``[N]``."""
    policy, approx_kl, clip_fraction = clipped_surrogate(log_prob, old_log_prob, advantage, clip_eps)
    v_loss = value_loss(value, old_value, target, vf_clip_eps)
    ent = jnp.mean(entropy)
    total = policy + vf_coef * v_loss - ent_coef * ent
    return total, LossInfo(total, policy, v_loss, ent, approx_kl, clip_fraction)
