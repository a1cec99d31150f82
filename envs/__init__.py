"""gymnax adapters and wrappers: ``env, env_params = envs.make("CartPole-v1")``."""

from envs.probes import PROBES
from envs.registry import env_ids, make
from envs.wrappers import EpisodeStatistics, EpisodeStatisticsState, FlattenObservation, RescaleAction, Wrapper

__all__ = [
    "PROBES",
    "EpisodeStatistics",
    "EpisodeStatisticsState",
    "FlattenObservation",
    "RescaleAction",
    "Wrapper",
    "env_ids",
    "make",
]
