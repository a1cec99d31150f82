"""Actor-critic network (flax.linen) and the distrax policy it defines."""

from __future__ import annotations

from typing import Sequence

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu}


class MLP(nn.Module):
    """Hidden layers with orthogonal(sqrt 2) init, then a linear head with orthogonal(``head_scale``) init."""

    hidden_sizes: Sequence[int]
    out_size: int
    activation: str = "tanh"
    head_scale: float = 1.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for size in self.hidden_sizes:
            x = act(nn.Dense(size, kernel_init=nn.initializers.orthogonal(np.sqrt(2.0)))(x))
        return nn.Dense(self.out_size, kernel_init=nn.initializers.orthogonal(self.head_scale))(x)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs over a flat observation ``[..., obs_dim]``.

    Returns ``(logits [..., num_actions], value [...])``.
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"

    def setup(self):
        self.actor = MLP(self.hidden_sizes, self.num_actions, self.activation, head_scale=0.01)
        self.critic = MLP(self.hidden_sizes, 1, self.activation, head_scale=1.0)

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.actor(obs), self.critic(obs)[..., 0]

    def value(self, obs: jax.Array) -> jax.Array:
        return self.critic(obs)[..., 0]


def policy(logits: jax.Array) -> distrax.Categorical:
    """The action distribution for a batch of logits."""
    return distrax.Categorical(logits=logits.astype(jnp.float32))
