"""Proximal Policy Optimisation (clipped surrogate) with pmean-synchronised updates."""

from __future__ import annotations

from agents.ppo.config import PPOConfig
from agents.ppo.learner import PPO, Batch, PPOState, make_optimizer, make_ppo, make_vector_optimizer
from agents.ppo.loss import LossInfo, clipped_surrogate, ppo_loss, value_loss
from agents.ppo.network import ActorCritic, make_network, policy


def train(config: PPOConfig = PPOConfig(), env: str = "CartPole-v1", *, devices: int = 0, run_dir: str = "",
          log_every: int = 10, on_log=None):
    """Train PPO from Python. Returns ``TrainResult(params, metrics, state, compile_s)``.

    ``metrics`` is a list of dicts, one per ``log_every`` updates (the same records as ``metrics.jsonl``).
    """
    from rlpar.runner import RunConfig, run

    from agents import AGENTS

    run_config = RunConfig(env=env, devices=devices, run_dir=run_dir, log_every=log_every)
    return run(AGENTS["ppo"], config, run_config, on_log=on_log)


__all__ = [
    "PPO",
    "ActorCritic",
    "Batch",
    "LossInfo",
    "PPOConfig",
    "PPOState",
    "clipped_surrogate",
    "make_network",
    "make_optimizer",
    "make_vector_optimizer",
    "make_ppo",
    "policy",
    "ppo_loss",
    "train",
    "value_loss",
]
