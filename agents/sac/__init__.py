"""Soft actor-critic: tanh-squashed Gaussian policy, twin critics with Polyak targets, learned temperature, and an
on-device replay buffer per device."""

from __future__ import annotations

from agents.sac.config import SACConfig
from agents.sac.learner import SAC, LossInfo, SACOptState, SACParams, SACState, make_sac
from agents.sac.loss import (gaussian_log_prob, soft_q_targets, squashed_gaussian, squashed_gaussian_log_prob,
                             tanh_log_det)
from agents.sac.networks import SquashedGaussianActor, TwinCritic
from rlpar.agent import AgentSpec

SPEC = AgentSpec(name="sac", config_cls=SACConfig, make=make_sac)


def train(config: SACConfig | None = None, env="Pendulum-v1", *, devices: int = 0, run_dir: str = "",
          log_every: int = 10, on_log=None, **run_options):
    """Train SAC from Python; returns ``rlpar.runner.TrainResult`` (``.params``: ``SACParams`` with the actor, the
    critics and log alpha; ``.metrics``, ...). ``config=None`` uses ``SACConfig()``; ``env`` and ``run_options`` as
    for ``agents.ppo.train``."""
    from rlpar import runner

    return runner.train(SPEC, config or SACConfig(), env, devices=devices, run_dir=run_dir, log_every=log_every,
                        on_log=on_log, **run_options)


__all__ = ["SAC", "SPEC", "LossInfo", "SACConfig", "SACOptState", "SACParams", "SACState", "SquashedGaussianActor",
           "TwinCritic", "gaussian_log_prob", "make_sac", "soft_q_targets", "squashed_gaussian",
           "squashed_gaussian_log_prob", "tanh_log_det", "train"]
