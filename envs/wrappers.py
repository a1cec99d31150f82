"""Wrappers that settle the gymnax 1.0 environment contract once, at the boundary.

Every wrapper keeps gymnax's six-value ``step``::

    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

and its auto-reset: after a ``terminated`` or ``truncated`` step the returned ``obs`` is the first observation of
the next episode, and ``info["final_observation"]`` is the observation the finished episode ended on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

UNSHAPED_REWARD = "unshaped_reward"  # info key: the env's own reward where the returned one is shaped for learning


def own_reward(reward: Any, info: Any) -> Any:
    """The reward an episode's return counts: ``info["unshaped_reward"]`` where the env shapes the reward it returns
    for learning (``envs.marl_suite``'s reward shaping), else ``reward`` itself."""
    return info.get(UNSHAPED_REWARD, reward) if isinstance(info, Mapping) else reward


# gymnax is imported inside the functions that need its spaces: ``import gymnax`` starts JAX's backends, and
# importing ``envs`` must not (the CLI sets devices and platforms after importing the package).


class Wrapper:
    """Base wrapper: forwards everything it does not override to the wrapped env.

    A plain class with gymnax's duck-typed environment interface (``reset``, ``step``, ``observation_space``,
    ``action_space``, ``default_params``, ``name``, ``num_actions``), so wrapping needs no gymnax import. Any other
    attribute (``step_env``, ``is_terminal``, ``state_space``, ...) is looked up on the wrapped env.
    """

    def __init__(self, env: Any):
        self._env = env

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails, so wrapper attributes win.
        if name == "_env":  # not yet set (copy/pickle): avoid infinite recursion
            raise AttributeError(name)
        return getattr(self._env, name)

    @property
    def unwrapped(self) -> Any:
        env = self._env
        while isinstance(env, Wrapper):
            env = env._env
        return env

    @property
    def default_params(self):
        return self._env.default_params

    @property
    def name(self) -> str:
        return self._env.name

    @property
    def num_actions(self) -> int:
        return self._env.num_actions

    def action_space(self, params=None):
        return self._env.action_space(params)

    def observation_space(self, params):
        return self._env.observation_space(params)

    def reset(self, key, params=None):
        return self._env.reset(key, params)

    def step(self, key, state, action, params=None):
        return self._env.step(key, state, action, params)


class FlattenObservation(Wrapper):
    """Flattens observations (and ``info["final_observation"]``) to float32 vectors ``[obs_dim]``.

    - ``Box`` of any shape: reshaped to ``[prod(shape)]`` and cast to float32.
    - ``Discrete(n)`` (e.g. FrozenLake's state index): a one-hot vector ``[n]``.
    - ``Dict``: its entries in sorted key order, ``Tuple``: its entries in order, each flattened by these rules
      (recursively) and concatenated; ``observation_space`` is the concatenated ``Box`` with the entries' bounds.

    Use this wrapper for MLP policies; image policies keep the original shape (``envs.make(flatten=False)``).
    """

    def observation_space(self, params):
        from gymnax.environments import spaces

        low, high = flat_bounds(self._env.observation_space(params))
        return spaces.Box(low, high, (int(low.shape[0]),), jnp.float32)

    def _flatten(self, obs: Any, params) -> jax.Array:
        return flatten_obs(obs, self._env.observation_space(params))

    def reset(self, key, params=None):
        params = self.default_params if params is None else params
        obs, state = self._env.reset(key, params)
        return self._flatten(obs, params), state

    def step(self, key, state, action, params=None):
        params = self.default_params if params is None else params
        obs, state, reward, terminated, truncated, info = self._env.step(key, state, action, params)
        info = {**info, "final_observation": self._flatten(info["final_observation"], params)}
        return self._flatten(obs, params), state, reward, terminated, truncated, info


def _children(space) -> list[tuple[Any, Any]] | None:
    """``[(key, subspace), ...]`` of a gymnax ``Dict`` (sorted keys) or ``Tuple`` (in order); ``None`` for a leaf."""
    from gymnax.environments import spaces

    if isinstance(space, spaces.Dict):
        return [(k, space.spaces[k]) for k in sorted(space.spaces)]
    if isinstance(space, spaces.Tuple):
        return list(enumerate(space.spaces))
    return None


def flat_bounds(space) -> tuple[jax.Array, jax.Array]:
    """``(low, high)``, each ``[obs_dim]`` float32, of ``space`` flattened as ``FlattenObservation`` does."""
    from gymnax.environments import spaces

    children = _children(space)
    if children is not None:
        bounds = [flat_bounds(sub) for _, sub in children]
        return jnp.concatenate([b[0] for b in bounds]), jnp.concatenate([b[1] for b in bounds])
    if isinstance(space, spaces.Discrete):
        return jnp.zeros((space.n,), jnp.float32), jnp.ones((space.n,), jnp.float32)
    low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), space.shape).reshape(-1)
    high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), space.shape).reshape(-1)
    return low, high


def flatten_obs(obs: Any, space) -> jax.Array:
    """One observation of ``space`` (an array, or a dict / tuple / dataclass of them) as a float32 ``[obs_dim]``."""
    from gymnax.environments import spaces

    children = _children(space)
    if children is not None:
        def entry(key):
            if isinstance(key, int) or isinstance(obs, Mapping):
                return obs[key]
            return getattr(obs, key)  # a struct dataclass observation with the Dict's keys as fields

        return jnp.concatenate([flatten_obs(entry(k), sub) for k, sub in children])
    if isinstance(space, spaces.Discrete):
        return jax.nn.one_hot(obs, space.n, dtype=jnp.float32)
    return jnp.reshape(obs, (-1,)).astype(jnp.float32)


class RescaleAction(Wrapper):
    """Lets the agent act in ``[-1, 1]^d`` for any ``Box`` action space.

    The action is clipped to ``[-1, 1]`` and mapped linearly onto ``[low, high]``. The agent keeps (and computes
    log-probabilities of) its unclipped Gaussian sample; only the environment sees the clipped, rescaled action.
    Clipping rather than tanh-squashing keeps PPO's ratio exact without a change-of-variables correction.
    """

    def action_space(self, params=None):
        from gymnax.environments import spaces

        space = self._env.action_space(params)
        return spaces.Box(-1.0, 1.0, space.shape, jnp.float32)

    def _rescale(self, action: jax.Array, params) -> jax.Array:
        space = self._env.action_space(params)
        low = jnp.asarray(space.low, jnp.float32)
        high = jnp.asarray(space.high, jnp.float32)
        unit = jnp.clip(action, -1.0, 1.0)
        return (low + (unit + 1.0) * 0.5 * (high - low)).reshape(space.shape)

    def step(self, key, state, action, params=None):
        params = self.default_params if params is None else params
        return self._env.step(key, state, self._rescale(action, params), params)


@struct.dataclass
class EpisodeStatisticsState:
    env_state: Any
    episode_return: jax.Array  # running undiscounted return of the current episode
    episode_length: jax.Array  # steps taken in the current episode


class EpisodeStatistics(Wrapper):
    """Tracks undiscounted episode return and length.

    Adds to ``info`` at every step:
      - ``episode_return``: return of the episode including this step's reward,
      - ``episode_length``: number of steps of the episode including this step,
      - ``episode_done``: True where this step ended the episode (terminated or truncated),
    so the finished episodes of a batch are ``info["episode_return"][info["episode_done"]]``.

    A reward with axes of its own (a team env's ``[A]``, one per agent: ``envs.marl_suite``) counts as its sum:
    ``episode_return`` is the team's summed reward. A scalar reward is its own sum, bit for bit. Where the env
    shapes the reward it returns for learning and gives its own as ``info["unshaped_reward"]`` (``envs.marl_suite``'s
    reward shaping), that one counts.
    """

    def reset(self, key, params=None):
        obs, env_state = self._env.reset(key, params)
        return obs, EpisodeStatisticsState(env_state, jnp.float32(0.0), jnp.int32(0))

    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self._env.step(
            key, state.env_state, action, params
        )
        done = jnp.logical_or(terminated, truncated)
        episode_return = state.episode_return + jnp.sum(jnp.asarray(own_reward(reward, info), jnp.float32))
        episode_length = state.episode_length + 1
        info = {
            **info,
            "episode_return": episode_return,
            "episode_length": episode_length,
            "episode_done": done,
        }
        state = EpisodeStatisticsState(
            env_state=env_state,
            episode_return=jnp.where(done, 0.0, episode_return),
            episode_length=jnp.where(done, 0, episode_length),
        )
        return obs, state, reward, terminated, truncated, info
