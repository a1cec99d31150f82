"""SAC's networks (flax.linen): a tanh-squashed Gaussian actor and twin critics, on the shared MLP torso."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from agents.networks import MLP

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0  # the actor's log standard deviation stays in this range


class SquashedGaussianActor(nn.Module):
    """``obs [..., obs_dim] -> (mean [..., d], log_std [..., d])`` of the Gaussian whose sample ``u`` acts as
    ``tanh(u)``; ``log_std`` is squashed smoothly into ``[LOG_STD_MIN, LOG_STD_MAX]``."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        out = MLP(self.hidden_sizes, 2 * self.action_dim, self.activation, head_scale=0.01)(obs.astype(jnp.float32))
        mean, raw = jnp.split(out, 2, axis=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (jnp.tanh(raw) + 1.0)
        return mean, log_std


class TwinCritic(nn.Module):
    """``(obs [..., obs_dim], action [..., d]) -> Q [2, ...]``: two independent MLP critics of the pair."""

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([obs.astype(jnp.float32), action.astype(jnp.float32)], axis=-1)
        return jnp.stack([MLP(self.hidden_sizes, 1, self.activation)(x)[..., 0] for _ in range(2)])
