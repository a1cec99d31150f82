"""The agent library: ``import agents; agents.ppo.train(agents.PPOConfig(), "CartPole-v1")``."""

from __future__ import annotations

from agents import advantages, ppo, ppo_rnn
from agents.advantages import gae, normalize
from agents.ppo import PPOConfig
from agents.ppo_rnn import RecurrentPPOConfig
from rlpar.runner import AgentSpec

AGENTS: dict[str, AgentSpec] = {
    "ppo": AgentSpec(name="ppo", config_cls=PPOConfig, make=ppo.make_ppo),
    "ppo_rnn": AgentSpec(name="ppo_rnn", config_cls=RecurrentPPOConfig, make=ppo_rnn.make_ppo_rnn),
}


def get(name: str) -> AgentSpec:
    """The agent registered as ``name``; ``ValueError`` listing the known ones otherwise."""
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}: known agents are {', '.join(sorted(AGENTS))}")
    return AGENTS[name]


__all__ = ["AGENTS", "PPOConfig", "RecurrentPPOConfig", "advantages", "gae", "get", "normalize", "ppo", "ppo_rnn"]
