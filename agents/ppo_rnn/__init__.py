"""Recurrent PPO: a GRU policy for partially observable environments (``python -m rlpar.train ppo_rnn``)."""

from agents.ppo_rnn.config import RecurrentPPOConfig
from agents.ppo_rnn.learner import RecurrentPPO, RecurrentPPOState, Sequences, make_ppo_rnn
from agents.ppo_rnn.network import RecurrentActorCritic, unroll
from rlpar.core.agent import AgentSpec
from rlpar.run.runner import make_train

SPEC = AgentSpec(name="ppo_rnn", config_cls=RecurrentPPOConfig, make=make_ppo_rnn)
train = make_train(SPEC, default_env="CartPole-v1")  # train(config=None, env="CartPole-v1", **run_options)

__all__ = [
    "RecurrentActorCritic",
    "RecurrentPPO",
    "RecurrentPPOConfig",
    "RecurrentPPOState",
    "SPEC",
    "Sequences",
    "make_ppo_rnn",
    "train",
    "unroll",
]
