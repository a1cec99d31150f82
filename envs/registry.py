"""``envs.make``: one entry point for gymnax environments and the project's probe environments."""

from __future__ import annotations

import difflib

import gymnax

from envs.probes import PROBES
from gymnax.environments import spaces

from envs.wrappers import EpisodeStatistics, FlattenObservation, RescaleAction


def env_ids() -> list[str]:
    """Every id ``make`` accepts: gymnax's registered environments, then the probes."""
    return list(gymnax.registered_envs) + list(PROBES)


def make(env_id: str, *, flatten: bool | None = None, **env_kwargs):
    """Build an environment ready for the engine.

    Args:
      env_id: a gymnax id (``"CartPole-v1"``, ``"Breakout-MinAtar"``, ...) or a probe id (``"Probe-OneStep-v0"``).
      flatten: flatten observations to float32 vectors (for MLP policies); ``None`` (default) flattens everything
        but images ``[H, W, C]``, which CNN policies take as they are.
      **env_kwargs: passed to the environment's constructor.

    Returns:
      ``(env, env_params)``: the env wrapped in ``EpisodeStatistics`` (and ``FlattenObservation``; and, for
      ``Box`` action spaces, ``RescaleAction`` so the agent acts in ``[-1, 1]^d``), keeping gymnax 1.0's six-value
      ``step``; ``env_params`` is its default parameter struct.

    Raises:
      ValueError: for an unknown id, listing the closest known ids.
    """
    if not isinstance(env_id, str) or env_id not in env_ids():
        known = env_ids()
        close = difflib.get_close_matches(str(env_id), known, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown env {env_id!r}.{hint} Known envs: {', '.join(known)}")
    if env_id in PROBES:
        env = PROBES[env_id](**env_kwargs)
        env_params = env.default_params
    else:
        env, env_params = gymnax.make(env_id, **env_kwargs)
    if isinstance(env.action_space(env_params), spaces.Box):
        env = RescaleAction(env)
    if flatten is None:
        flatten = len(env.observation_space(env_params).shape) != 3
    if flatten:
        env = FlattenObservation(env)
    return EpisodeStatistics(env), env_params
