"""PQN: parallel Q-learning (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning").

A LayerNorm Q-network acts epsilon-greedily in many parallel environments; each rollout is turned into Q(lambda)
targets and learned from for a few epochs of minibatches, then dropped: no replay buffer, no target network.
``python -m rlpar.train pqn --env CartPole-v1``, or from Python ``agents.pqn.train(None, "CartPole-v1")``.
Discrete action spaces only (``agents.spaces.discrete_actions`` refuses others with a one-line error).
"""

from __future__ import annotations

from agents.pqn.config import PQNConfig
from agents.pqn.learner import PQN, Batch, PQNState, make_pqn
from agents.pqn.network import QNetwork, q_network
from agents.pqn.qlearning import epsilon_greedy, epsilon_schedule, q_lambda_returns, td_loss
from rlpar.core.agent import AgentSpec
from rlpar.run.runner import make_train

SPEC = AgentSpec(name="pqn", config_cls=PQNConfig, make=make_pqn)


train = make_train(SPEC, default_env="CartPole-v1")  # train(config=None, env="CartPole-v1", **run_options)


__all__ = [
    "PQN",
    "SPEC",
    "Batch",
    "PQNConfig",
    "PQNState",
    "QNetwork",
    "epsilon_greedy",
    "epsilon_schedule",
    "make_pqn",
    "q_lambda_returns",
    "q_network",
    "td_loss",
    "train",
]
