"""The agent library, built on the engine's contract (``rlpar.agent``):
``import agents; agents.ppo.train(agents.PPOConfig(), "CartPole-v1")``.

Each agent package exports ``SPEC`` (an ``rlpar.agent.AgentSpec``); the CLI finds them by name through
``rlpar.tools.registry``: ``ppo``, ``ppo_rnn``, ``pqn``, ``dqn``, ``sac``. Shared pieces: ``agents.networks`` (MLP/CNN
torsos, actor-critic), ``agents.optim`` (the optimizer chain), ``agents.advantages`` (GAE), ``agents.normalization``
(observation statistics), ``agents.replay`` (on-device replay, target networks: DQN and SAC), ``agents.spaces``
(which agents take which action spaces), ``agents.layers`` and ``agents.platform`` (the XLA:CPU fast paths and
their switch).
"""

from __future__ import annotations

from agents import advantages, dqn, ppo, ppo_rnn, pqn, sac
from agents.advantages import gae, normalize
from agents.dqn import DQNConfig
from agents.ppo import PPOConfig
from agents.ppo_rnn import RecurrentPPOConfig
from agents.pqn import PQNConfig
from agents.sac import SACConfig

__all__ = ["DQNConfig", "PPOConfig", "PQNConfig", "RecurrentPPOConfig", "SACConfig", "advantages", "dqn", "gae",
           "normalize", "ppo", "ppo_rnn", "pqn", "sac"]
