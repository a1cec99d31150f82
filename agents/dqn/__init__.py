"""Double DQN with a target network, epsilon-greedy exploration and an on-device replay buffer per device."""

from __future__ import annotations

from agents.dqn.config import DQNConfig
from agents.dqn.learner import DQN, DQNState, LossInfo, make_dqn
from agents.dqn.loss import double_q_targets, linear_schedule, td_loss
from rlpar.core.agent import AgentSpec
from rlpar.run.runner import make_train

SPEC = AgentSpec(name="dqn", config_cls=DQNConfig, make=make_dqn)


train = make_train(SPEC, default_env="CartPole-v1")  # train(config=None, env="CartPole-v1", **run_options)


__all__ = ["DQN", "SPEC", "DQNConfig", "DQNState", "LossInfo", "double_q_targets", "linear_schedule", "make_dqn",
           "td_loss", "train"]
