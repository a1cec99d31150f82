"""Environments for the engine: ``env, env_params = envs.make("CartPole-v1")``.

``make`` also takes ids added with ``register``, ``"package.module:factory"`` strings and gymnax-API environment
instances, and adapts gymnax 0.0.x-style five-value ``step`` to gymnax 1.0's six values. Importing this package
imports no gymnax and starts no JAX backend; that happens on the first ``make``.
"""

from envs.adapters import FiveToSixStep
from envs.probes import PROBES
from envs.registry import env_ids, make, register
from envs.wrappers import EpisodeStatistics, EpisodeStatisticsState, FlattenObservation, RescaleAction, Wrapper

__all__ = [
    "PROBES",
    "EpisodeStatistics",
    "EpisodeStatisticsState",
    "FiveToSixStep",
    "FlattenObservation",
    "RescaleAction",
    "Wrapper",
    "env_ids",
    "make",
    "register",
]
