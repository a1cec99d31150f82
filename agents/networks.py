"""Shared network pieces (flax.linen): MLP and CNN torsos, the actor-critic, the policies they define.

The torso is chosen by observation shape: vectors ``[obs_dim]`` go through an MLP, images ``[H, W, C]`` (MinAtar,
Pong) through a small CNN. The head is chosen by action space: ``Discrete(n)`` gives a categorical policy over
``n`` logits, ``Box`` a diagonal Gaussian with a learned, state-independent log-std (the env wrapper clips the
sample to ``[-1, 1]`` and rescales it, see ``envs.RescaleAction``).
"""

from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from agents.distributions import Categorical, DiagonalGaussian
from agents.layers import Conv3x3, Dense

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu}
TORSOS = ("auto", "mlp")  # image observations: convolution then MLP, or the MLP on the flattened image


class MLP(nn.Module):
    """Hidden layers with orthogonal(sqrt 2) init, then a linear head with orthogonal(``head_scale``) init.

    Its layers are ``agents.layers.Dense``: ``nn.Dense``'s parameters (and, on XLA:CPU, a faster backward pass).
    """

    hidden_sizes: Sequence[int]
    out_size: int
    activation: str = "tanh"
    head_scale: float = 1.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for size in self.hidden_sizes:
            x = act(Dense(size, kernel_init=nn.initializers.orthogonal(np.sqrt(2.0)))(x))
        return Dense(self.out_size, kernel_init=nn.initializers.orthogonal(self.head_scale))(x)


class ConvTorso(nn.Module):
    """One 3x3 convolution (16 channels, stride 1, SAME padding, ReLU; the MinAtar paper's network) over
    ``[..., H, W, C]``, flattened to ``[..., H * W * channels]``. ``agents.layers.Conv3x3`` (``nn.Conv``'s parameters;
    on XLA:CPU computed as a dense layer over 3x3 patches, see ``agents.platform``)."""

    channels: int = 16

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch_shape = x.shape[:-3]
        kernel_init = nn.initializers.orthogonal(np.sqrt(2.0))
        x = nn.relu(Conv3x3(self.channels, kernel_init=kernel_init)(x.astype(jnp.float32)))
        return x.reshape(batch_shape + (-1,))


class Head(nn.Module):
    """Optional CNN torso, then an MLP to ``out_size``."""

    hidden_sizes: Sequence[int]
    out_size: int
    activation: str
    head_scale: float
    image: bool
    obs_ndim: int = 1  # dimensions of one observation; more than one (an image the MLP reads) are flattened

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = ConvTorso()(obs) if self.image else obs.astype(jnp.float32)
        x = x.reshape(*x.shape[: x.ndim - self.obs_ndim], -1) if self.obs_ndim > 1 else x  # flatten an image
        return MLP(self.hidden_sizes, self.out_size, self.activation, self.head_scale)(x)


class ActorCritic(nn.Module):
    """Separate actor and critic networks.

    ``__call__(obs [..., *obs_shape]) -> (policy_params [..., action_dim], value [...])`` where ``policy_params`` are
    logits (discrete) or Gaussian means (continuous); ``log_std`` is a learned parameter ``[action_dim]``.
    """

    action_dim: int
    continuous: bool = False
    image: bool = False
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    obs_ndim: int = 1  # dimensions of one observation (3 for an image the MLP reads flattened)

    def setup(self):
        flat = 1 if self.image else self.obs_ndim  # the convolution torso flattens its own output
        self.actor = Head(self.hidden_sizes, self.action_dim, self.activation, 0.01, self.image, flat)
        self.critic = Head(self.hidden_sizes, 1, self.activation, 1.0, self.image, flat)
        if self.continuous:
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.actor(obs), self.critic(obs)[..., 0]

    def value(self, obs: jax.Array) -> jax.Array:
        return self.critic(obs)[..., 0]

    def distribution(self, obs: jax.Array):
        """``(pi, value)``: the policy for ``obs`` (``agents.distributions``) and the critic's value."""
        out, value = self(obs)
        if self.continuous:
            std = jnp.broadcast_to(jnp.exp(self.log_std), out.shape)
            return DiagonalGaussian(out, std), value
        return policy(out), value


def policy(logits: jax.Array) -> Categorical:
    """The categorical action distribution for a batch of logits."""
    return Categorical.of(logits)


def make_network(observation_space, action_space, hidden_sizes: Sequence[int], activation: str,
                 torso: str = "auto") -> ActorCritic:
    """The actor-critic that fits these spaces (see module docstring); ``torso="mlp"`` flattens images instead of
    convolving them."""
    continuous = not hasattr(action_space, "n")  # gymnax Discrete has n; Box has low, high, shape
    action_dim = int(np.prod(action_space.shape)) if continuous else int(action_space.n)
    image = len(observation_space.shape) == 3 and torso == "auto"
    return ActorCritic(action_dim, continuous, image, tuple(hidden_sizes), activation,
                       obs_ndim=len(observation_space.shape))
