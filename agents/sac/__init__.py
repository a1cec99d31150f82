"""Soft actor-critic: tanh-squashed Gaussian policy, twin critics with Polyak targets, learned temperature, and an
on-device replay buffer per device."""

from __future__ import annotations

from agents.sac.config import SACConfig
from agents.sac.learner import SAC, LossInfo, SACOptState, SACParams, SACState, make_sac
from agents.sac.loss import (gaussian_log_prob, soft_q_targets, squashed_gaussian, squashed_gaussian_log_prob,
                             tanh_log_det)
from agents.sac.networks import SquashedGaussianActor, TwinCritic
from rlpar.core.agent import AgentSpec
from rlpar.run.runner import make_train

SPEC = AgentSpec(name="sac", config_cls=SACConfig, make=make_sac)


train = make_train(SPEC, default_env="Pendulum-v1")  # train(config=None, env="Pendulum-v1", **run_options)


__all__ = ["SAC", "SPEC", "LossInfo", "SACConfig", "SACOptState", "SACParams", "SACState", "SquashedGaussianActor",
           "TwinCritic", "gaussian_log_prob", "make_sac", "soft_q_targets", "squashed_gaussian",
           "squashed_gaussian_log_prob", "tanh_log_det", "train"]
