"""PQN's Q-network: LayerNorm after every hidden layer (and after the convolution on images), then a linear Q head.

LayerNorm is what lets PQN drop the target network and the replay buffer (Gallici et al. 2024): it keeps the
features bounded, so TD updates on freshly collected, correlated data stay stable. ``layer_norm=False`` gives the
same network without it, for comparison.
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from agents.layers import Conv3x3, Dense
from agents.networks import ACTIVATIONS


class QNetwork(nn.Module):
    """``obs [..., *obs_shape] -> Q [..., num_actions]``.

    Vectors ``[obs_dim]``: ``hidden_sizes`` layers of Dense -> LayerNorm -> activation. Images ``[H, W, C]``
    (MinAtar): first a 3x3 convolution with ``channels`` filters -> LayerNorm (over each pixel's channels) ->
    activation, flattened, then the same. Layers are ``agents.layers``' (flax's parameters; XLA:CPU fast paths
    behind ``agents.platform``).
    """

    num_actions: int
    hidden_sizes: Sequence[int] = (128, 128)
    activation: str = "relu"
    layer_norm: bool = True
    image: bool = False
    channels: int = 16

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        hidden_init = nn.initializers.orthogonal(np.sqrt(2.0))
        x = obs.astype(jnp.float32)
        if self.image:
            batch_shape = x.shape[:-3]
            x = self._normalize(Conv3x3(self.channels, kernel_init=hidden_init)(x))
            x = act(x).reshape(batch_shape + (-1,))
        for size in self.hidden_sizes:
            x = act(self._normalize(Dense(size, kernel_init=hidden_init)(x)))
        return Dense(self.num_actions, kernel_init=nn.initializers.orthogonal(1.0))(x)

    def _normalize(self, x: jax.Array) -> jax.Array:
        return nn.LayerNorm()(x) if self.layer_norm else x


def q_network(observation_space, num_actions: int, hidden_sizes: Sequence[int], activation: str,
              layer_norm: bool) -> QNetwork:
    """The Q-network for these spaces: a CNN torso for image observations ``[H, W, C]``, an MLP otherwise."""
    image = len(observation_space.shape) == 3
    return QNetwork(num_actions, tuple(hidden_sizes), activation, layer_norm, image)
