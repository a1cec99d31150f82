"""Recurrent PPO: a GRU policy for partially observable environments (``python -m rlpar.train ppo_rnn``)."""

from agents.ppo_rnn.config import RecurrentPPOConfig
from agents.ppo_rnn.learner import RecurrentPPO, RecurrentPPOState, RecurrentRollout, Sequences, make_ppo_rnn
from agents.ppo_rnn.network import RecurrentActorCritic, unroll

__all__ = [
    "RecurrentActorCritic",
    "RecurrentPPO",
    "RecurrentPPOConfig",
    "RecurrentPPOState",
    "RecurrentRollout",
    "Sequences",
    "make_ppo_rnn",
    "unroll",
]
