"""The team's shared actor-critic: what each agent reads, and the network all agents share.

``AgentInputs`` is a team observation (``envs.marl_suite.TeamObservation``) seen per agent: every leaf ``[..., A, ...]``
with the world state repeated for each agent (empty for IPPO, whose critic reads the agent's own observation).
``TeamActorCritic`` is an ``agents.networks.ActorCritic`` whose ``__call__`` takes those inputs, so PPO's fit
(``agents.ppo.learner.make_fit``) trains it unchanged: the actor reads the agent's observation (and its one-hot id),
and its logits are masked where the action is unavailable; the critic reads the same (IPPO) or the world state
(MAPPO, centralised).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from agents.networks import MLP, ActorCritic

MASKED_LOGIT = -1e9  # the logit of an unavailable action: probability exactly 0 in float32, log-probability finite


@struct.dataclass
class AgentInputs:
    """Per-agent network inputs; leaves ``[..., A, ...]`` (``[N, ...]`` once agents are flattened into the batch)."""

    obs: jax.Array  # [..., D] the agent's own observation
    agent_id: jax.Array  # [..., A] its one-hot id
    action_mask: jax.Array  # [..., n] 1 where available
    world_state: jax.Array  # [..., W] the team's state (W = 0 for a decentralised critic)


def agent_inputs(team_obs, centralised: bool, use_mask: bool) -> AgentInputs:
    """``AgentInputs`` from a ``TeamObservation`` with leaves ``[..., A, ...]`` (``world_state [..., W]``)."""
    obs = team_obs.obs
    if centralised:
        ws = team_obs.world_state
        world = jnp.broadcast_to(ws[..., None, :], obs.shape[:-1] + ws.shape[-1:])
    else:
        world = jnp.zeros(obs.shape[:-1] + (0,), jnp.float32)
    mask = team_obs.action_mask if use_mask else jnp.ones_like(team_obs.action_mask)
    return AgentInputs(obs, team_obs.agent_id, mask, world)


def masked_logits(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """``logits`` where ``mask`` is 1, ``MASKED_LOGIT`` where it is 0 (shapes ``[..., n]``)."""
    return jnp.where(mask > 0, logits, MASKED_LOGIT)


def actor_input(x: AgentInputs, use_agent_id: bool) -> jax.Array:
    return jnp.concatenate([x.obs, x.agent_id], axis=-1) if use_agent_id else x.obs


def critic_input(x: AgentInputs, use_agent_id: bool, centralised: bool) -> jax.Array:
    if not centralised:
        return actor_input(x, use_agent_id)
    return jnp.concatenate([x.world_state, x.agent_id], axis=-1) if use_agent_id else x.world_state


class TeamActorCritic(ActorCritic):
    """``__call__(AgentInputs [..., ...]) -> (masked logits [..., n], value [...])``; separate actor and critic MLPs
    (``hidden_sizes``, ``activation``; heads as ``ActorCritic``'s)."""

    use_agent_id: bool = False
    centralised: bool = False

    def setup(self):
        self.actor = MLP(self.hidden_sizes, self.action_dim, self.activation, 0.01)
        self.critic = MLP(self.hidden_sizes, 1, self.activation, 1.0)

    def __call__(self, x: AgentInputs) -> tuple[jax.Array, jax.Array]:
        logits = masked_logits(self.actor(actor_input(x, self.use_agent_id)), x.action_mask)
        return logits, self.value(x)

    def value(self, x: AgentInputs) -> jax.Array:
        return self.critic(critic_input(x, self.use_agent_id, self.centralised))[..., 0]


class RecurrentTeamActorCritic(nn.Module):
    """One step of the recurrent variant: ``(hidden, AgentInputs [B, ...], reset [B]) -> (hidden, logits, value)``.

    ``hidden = (actor [B, H], critic [B, H])``, replaced by zeros where ``reset`` (an episode starts). Actor and
    critic each: a dense layer (ReLU), a GRU, then an MLP head (``hidden_sizes``).
    """

    action_dim: int
    gru_size: int
    hidden_sizes: tuple[int, ...] = (64,)
    activation: str = "tanh"
    use_agent_id: bool = False
    centralised: bool = False

    def setup(self):
        self.actor_embed = nn.Dense(self.gru_size)
        self.critic_embed = nn.Dense(self.gru_size)
        self.actor_gru = nn.GRUCell(self.gru_size)
        self.critic_gru = nn.GRUCell(self.gru_size)
        self.actor_head = MLP(self.hidden_sizes, self.action_dim, self.activation, 0.01)
        self.critic_head = MLP(self.hidden_sizes, 1, self.activation, 1.0)

    def __call__(self, hidden, x: AgentInputs, reset: jax.Array):
        h_actor, h_critic = (jnp.where(reset[:, None], 0.0, h) for h in hidden)
        h_actor, a = self.actor_gru(h_actor, nn.relu(self.actor_embed(actor_input(x, self.use_agent_id))))
        h_critic, c = self.critic_gru(h_critic, nn.relu(self.critic_embed(
            critic_input(x, self.use_agent_id, self.centralised))))
        logits = masked_logits(self.actor_head(a), x.action_mask)
        return (h_actor, h_critic), logits, self.critic_head(c)[..., 0]

    def initial_hidden(self, batch: int):
        zeros = jnp.zeros((batch, self.gru_size), jnp.float32)
        return zeros, zeros
