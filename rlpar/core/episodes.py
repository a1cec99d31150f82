"""Whole episodes of a policy export, on the device: the greedy evaluation the training program runs.

``make_episodes`` steps ``N`` fresh environments (separate from the training environments, with keys of their own)
with a policy ``fn(carry, obs, key) -> (action, carry)`` (``Agent.policy``) inside one ``lax.while_loop`` until every
episode has ended or ``max_steps`` steps have passed; only each environment's first episode counts. ``gather``
collects every device's episodes into one table that every device holds, so the host reads all of them.

Pure and device-agnostic like the rest of the per-device code: the device axis comes in as ``axis_name``.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from envs.wrappers import own_reward
from rlpar.core.collectives import axis_index, psum

STEP_CAP = 10_000  # steps an evaluation episode may last when the env's params have no max_steps_in_episode
RETURNS = "eval/returns"  # metric: [N] undiscounted return of each evaluation episode, over all devices
LENGTHS = "eval/lengths"  # metric: [N] steps of each evaluation episode


class Episodes(NamedTuple):
    returns: jax.Array  # [N] float32 undiscounted return of each environment's first episode
    lengths: jax.Array  # [N] int32 its steps
    ended: jax.Array  # [N] bool: it ended (False: cut at max_steps)


@struct.dataclass
class _Loop:
    """The while loop's state; every per-environment leaf is ``[N, ...]``."""

    t: jax.Array  # int32 steps taken
    obs: jax.Array
    env_state: Any
    carry: Any  # the policy's recurrent state
    key: jax.Array
    ended: jax.Array  # [N] bool
    returns: jax.Array  # [N] float32
    lengths: jax.Array  # [N] int32


def max_steps(env_params, cap: int = STEP_CAP) -> int:
    """How long an evaluation episode may last: the env's time limit (``env_params.max_steps_in_episode``), else
    ``cap``. With a time limit every episode ends within it, since gymnax truncates there."""
    limit = getattr(env_params, "max_steps_in_episode", None)
    return int(limit) if limit is not None else cap


def make_episodes(env, env_params, initial_carry: Callable[[int], Any], num_episodes: int, steps: int):
    """``run(policy_fn, key) -> Episodes``: ``num_episodes`` episodes of ``policy_fn`` on fresh environments.

    ``env`` is an engine env (``envs.make``: six-value, auto-resetting ``step``); steps of an environment after its
    first episode ended are ignored. The loop stops as soon as every first episode has ended (each device on its
    own: there is no collective inside), after at most ``steps`` steps.
    """
    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def body(policy_fn, loop: _Loop) -> _Loop:
        keys = jax.random.split(loop.key, 2 + num_episodes)  # next, acting, one per environment: one split
        action, carry = policy_fn(loop.carry, loop.obs, keys[1])
        obs, env_state, reward, terminated, truncated, info = step_envs(keys[2:], loop.env_state, action, env_params)
        reward = own_reward(reward, info)
        running = jnp.logical_not(loop.ended)
        return _Loop(
            t=loop.t + 1, obs=obs, env_state=env_state, carry=carry, key=keys[0],
            ended=loop.ended | terminated | truncated,
            returns=loop.returns + jnp.where(running, team_reward(reward), 0.0),
            lengths=loop.lengths + running.astype(jnp.int32),
        )

    def run(policy_fn, key: jax.Array) -> Episodes:
        key_reset, key_loop = jax.random.split(key)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key_reset, num_episodes), env_params)
        start = (obs, env_state, initial_carry(num_episodes), jnp.zeros(num_episodes, bool),
                 jnp.zeros(num_episodes, jnp.float32), jnp.zeros(num_episodes, jnp.int32))
        # Under shard_map a constant (a reset's time 0, a zero carry) is typed as the same on every device, while
        # the loop's outputs vary per device; a select with a flag drawn from this device's key (always True, so
        # XLA folds it away) types the start alike.
        per_device = jax.random.bits(key_loop, (), jnp.uint32) >= 0
        obs, env_state, carry, ended, returns, lengths = jax.tree.map(lambda x: jnp.where(per_device, x, x), start)
        loop = _Loop(t=jnp.int32(0), obs=obs, env_state=env_state, carry=carry, key=key_loop, ended=ended,
                     returns=returns, lengths=lengths)
        loop = jax.lax.while_loop(lambda s: (s.t < steps) & ~jnp.all(s.ended), lambda s: body(policy_fn, s), loop)
        return Episodes(loop.returns, loop.lengths, loop.ended)

    return run


def team_reward(reward: jax.Array) -> jax.Array:
    """``[N]``: each environment's reward, summed over its own axes (a team env's agents, ``[N, A]``) if it has any;
    the same values as ``envs.EpisodeStatistics`` counts."""
    reward = reward.astype(jnp.float32)
    return reward if reward.ndim == 1 else jnp.sum(reward.reshape(reward.shape[0], -1), axis=1)


def gather(episodes: Episodes, axis_name: str | None) -> dict:
    """``{RETURNS: [D * n], LENGTHS: [D * n]}``: every device's ``n`` episodes in device order, the same on every
    device (each device writes its rows into zeros and one ``psum`` adds them up)."""
    n = episodes.returns.shape[0]
    num_devices = 1 if axis_name is None else jax.lax.axis_size(axis_name)
    start = axis_index(axis_name) * n

    def place(x):
        return jax.lax.dynamic_update_slice(jnp.zeros((num_devices * n,), x.dtype), x, (start,))

    return psum({RETURNS: place(episodes.returns), LENGTHS: place(episodes.lengths)}, axis_name)
