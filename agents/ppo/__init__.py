"""Proximal Policy Optimisation (clipped surrogate) with pmean-synchronised updates."""

from __future__ import annotations

from agents.networks import ActorCritic, make_network, policy
from agents.ppo.config import PPOConfig
from agents.ppo.learner import PPO, Batch, PPOState, make_ppo
from agents.ppo.loss import LossInfo, clipped_surrogate, ppo_loss, value_loss
from rlpar.core.agent import AgentSpec
from rlpar.run.runner import make_train

SPEC = AgentSpec(name="ppo", config_cls=PPOConfig, make=make_ppo)


train = make_train(SPEC, default_env="CartPole-v1")  # train(config=None, env="CartPole-v1", **run_options)


__all__ = [
    "PPO",
    "SPEC",
    "ActorCritic",
    "Batch",
    "LossInfo",
    "PPOConfig",
    "PPOState",
    "clipped_surrogate",
    "make_network",
    "make_ppo",
    "policy",
    "ppo_loss",
    "train",
    "value_loss",
]
