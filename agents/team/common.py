"""What the feed-forward (``agents.team.learner``) and recurrent (``agents.team.recurrent``) IPPO / MAPPO share: the
per-device state, the functions an agent exports, and how a team's inputs and flags are shaped per agent.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from agents.team.config import TeamConfig
from agents.team.network import AgentInputs, TeamActorCritic


@struct.dataclass
class TeamAgentState:
    """Per-device state; ``params`` and ``opt_state`` are identical on every device."""

    params: Any
    opt_state: Any
    key: jax.Array  # this device's key for minibatch shuffling


class TeamPPO(NamedTuple):
    """The ``rlpar.agent.Agent`` functions of IPPO / MAPPO (feed-forward), plus the network and the gradient."""

    network: TeamActorCritic
    init: Callable
    initial_carry: Callable
    act: Callable  # (state, carry, TeamObservation [B, ...], key) -> (action [B, A], carry, {"log_prob", "value"})
    bootstrap: Callable  # (state, carry, final TeamObservation) -> V [B, A]
    learn: Callable
    policy: Callable
    grad: Callable  # (params, Batch [N]) -> (pmean-ed gradient, LossInfo): PPO's, on agent samples


def uses_masks(agent: str, config: TeamConfig, env) -> bool:
    """Whether the policy reads the env's action masks (``config.action_mask``); ``on`` for an env without them is
    the one-line ``ValueError``."""
    has = bool(getattr(env, "has_action_masks", False))
    if config.action_mask == "on" and not has:
        raise ValueError(f"action_mask='on': {agent} was asked to respect action masks, but "
                         f"{getattr(env, 'name', type(env).__name__)} has none (no get_avail_actions); use "
                         "action_mask=auto or off")
    return has and config.action_mask != "off"


def example_inputs(env, centralised: bool, batch: int = 1) -> AgentInputs:
    """Zeros shaped like ``batch`` agents' inputs, to initialise a network."""
    a, n = env.num_agents, env.num_actions
    w = env.world_state_size if centralised else 0
    return AgentInputs(jnp.zeros((batch, env.obs_size)), jnp.zeros((batch, a)), jnp.ones((batch, n)),
                       jnp.zeros((batch, w)))


def per_agent(flags: jax.Array, num_agents: int) -> jax.Array:
    """A team's ``[T, B]`` flags repeated for each agent: ``[T, B * A]`` (agent fastest, as ``x.reshape(T, -1)``
    orders ``[T, B, A]``)."""
    return jnp.repeat(flags, num_agents, axis=1)
