"""Recurrent actor-critic: an embedding, a GRU whose state resets where episodes start, then actor/critic MLPs."""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from agents.distributions import Categorical
from agents.networks import MLP, policy


class RecurrentActorCritic(nn.Module):
    """One step: ``(hidden [B, H], obs [B, obs_dim], reset [B]) -> (hidden', logits [B, A], value [B])``.

    Where ``reset`` is True (the first step of a new episode) the incoming hidden state is replaced by zeros before
    the GRU reads ``obs``, so nothing leaks across episode boundaries.
    """

    num_actions: int
    gru_size: int = 64
    hidden_sizes: Sequence[int] = (64,)
    activation: str = "tanh"

    @nn.compact
    def __call__(self, hidden: jax.Array, obs: jax.Array, reset: jax.Array):
        hidden = jnp.where(reset[:, None], jnp.zeros_like(hidden), hidden)
        x = nn.relu(nn.Dense(self.gru_size, kernel_init=nn.initializers.orthogonal(np.sqrt(2.0)))(obs))
        hidden, x = nn.GRUCell(self.gru_size)(hidden, x)
        logits = MLP(self.hidden_sizes, self.num_actions, self.activation, head_scale=0.01)(x)
        value = MLP(self.hidden_sizes, 1, self.activation, head_scale=1.0)(x)[..., 0]
        return hidden, logits, value

    def initial_hidden(self, batch: int) -> jax.Array:
        return jnp.zeros((batch, self.gru_size), jnp.float32)


def unroll(network: RecurrentActorCritic, params, hidden: jax.Array, obs: jax.Array, reset: jax.Array):
    """Run the network over a sequence: ``hidden [B, H]``, ``obs [T, B, ...]``, ``reset [T, B]`` ->
    ``(final hidden [B, H], logits [T, B, A], value [T, B])``."""

    def step(h, inputs):
        o, r = inputs
        h, logits, value = network.apply(params, h, o, r)
        return h, (logits, value)

    hidden, (logits, value) = jax.lax.scan(step, hidden, (obs, reset))
    return hidden, logits, value


def distribution(logits: jax.Array) -> Categorical:
    return policy(logits)
