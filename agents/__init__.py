"""The agent library, built on the engine's contract (``rlpar.agent``):
``import agents; agents.ppo.train(agents.PPOConfig(), "CartPole-v1")``.

Each agent package exports ``SPEC`` (an ``rlpar.agent.AgentSpec``); the CLI finds them by name through
``rlpar.registry``. Shared pieces: ``agents.networks`` (MLP/CNN torsos, actor-critic), ``agents.optim`` (the
optimizer chain), ``agents.advantages`` (GAE), ``agents.normalization`` (observation statistics),
``agents.layers`` and ``agents.platform`` (the XLA:CPU fast paths and their switch).
"""

from __future__ import annotations

from agents import advantages, ppo, ppo_rnn
from agents.advantages import gae, normalize
from agents.ppo import PPOConfig
from agents.ppo_rnn import RecurrentPPOConfig

__all__ = ["PPOConfig", "RecurrentPPOConfig", "advantages", "gae", "normalize", "ppo", "ppo_rnn"]
