"""Double DQN with a target network, epsilon-greedy exploration and an on-device replay buffer per device."""

from __future__ import annotations

from agents.dqn.config import DQNConfig
from agents.dqn.learner import DQN, DQNState, LossInfo, make_dqn
from agents.dqn.loss import double_q_targets, linear_schedule, td_loss
from rlpar.agent import AgentSpec

SPEC = AgentSpec(name="dqn", config_cls=DQNConfig, make=make_dqn)


def train(config: DQNConfig | None = None, env="CartPole-v1", *, devices: int = 0, run_dir: str = "",
          log_every: int = 10, on_log=None, **run_options):
    """Train DQN from Python; returns ``rlpar.runner.TrainResult`` (``.params``: the online Q-network, ``.metrics``,
    ...). ``config=None`` uses ``DQNConfig()``; ``env`` and ``run_options`` as for ``agents.ppo.train``."""
    from rlpar import runner

    return runner.train(SPEC, config or DQNConfig(), env, devices=devices, run_dir=run_dir, log_every=log_every,
                        on_log=on_log, **run_options)


__all__ = ["DQN", "SPEC", "DQNConfig", "DQNState", "LossInfo", "double_q_targets", "linear_schedule", "make_dqn",
           "td_loss", "train"]
