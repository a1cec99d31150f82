"""Proximal Policy Optimisation (clipped surrogate) with pmean-synchronised updates."""

from __future__ import annotations

from agents.networks import ActorCritic, make_network, policy
from agents.ppo.config import PPOConfig
from agents.ppo.learner import PPO, Batch, PPOState, make_ppo
from agents.ppo.loss import LossInfo, clipped_surrogate, ppo_loss, value_loss
from rlpar.agent import AgentSpec

SPEC = AgentSpec(name="ppo", config_cls=PPOConfig, make=make_ppo)


def train(config: PPOConfig | None = None, env="CartPole-v1", *, devices: int = 0, run_dir: str = "",
          log_every: int = 10, on_log=None, **run_options):
    """Train PPO from Python; returns ``rlpar.runner.TrainResult`` (``.params``, ``.metrics``, ...).

    ``config=None`` uses the env's preset (``PPOConfig.for_env(env)``, as the CLI does); a config you pass is used
    as it is. ``env`` is an id (``"CartPole-v1"``, a registered id, ``"package.module:factory"``) or a gymnax-API
    ``Environment`` instance (or ``(env, env_params)``). ``devices=N`` on a CPU host creates N CPU devices when
    this is the process's first JAX work. ``run_options`` are further ``rlpar.runner.RunConfig`` fields
    (``num_seeds``, ``sweep``, ``backend``, ``checkpoint_every``...).
    """
    from rlpar import runner

    if config is None:
        config = PPOConfig.for_env(env if isinstance(env, str) else "")
    return runner.train(SPEC, config, env, devices=devices, run_dir=run_dir, log_every=log_every, on_log=on_log,
                        **run_options)


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
