"""The per-device experience collector: ``jax.vmap`` over environments inside ``jax.lax.scan`` over time.

Pure and device-agnostic: it knows nothing about how many devices exist. ``B`` below is the number of environments
on this device.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct


class Transition(NamedTuple):
    """One time-major batch of experience; every leaf is ``[T, B, ...]``.

    ``terminated`` and ``truncated`` stay apart: a terminated step has no future, a truncated one (time limit) does,
    and ``final_value`` holds the critic's value of ``info["final_observation"]`` for those steps (0 elsewhere), so
    advantage estimation can bootstrap from it.
    """

    obs: jax.Array  # [T, B, *obs_shape] observation the action was chosen from
    action: jax.Array  # [T, B, *action_shape]
    log_prob: jax.Array  # [T, B] log pi(action | obs) under the acting params
    value: jax.Array  # [T, B] critic value of obs under the acting params
    reward: jax.Array  # [T, B]
    terminated: jax.Array  # [T, B] bool, the episode reached a terminal state
    truncated: jax.Array  # [T, B] bool, the episode was cut by a time limit (and did not terminate)
    final_value: jax.Array  # [T, B] V(final_observation) where truncated, else 0
    episode_return: jax.Array  # [T, B] undiscounted return of the episode so far (final where episode_done)
    episode_length: jax.Array  # [T, B] steps of the episode so far (final where episode_done)
    episode_done: jax.Array  # [T, B] bool, this step ended an episode


@struct.dataclass
class RolloutState:
    """What the collector carries between calls, per device."""

    env_state: Any  # batched env state, leaves [B, ...]
    obs: jax.Array  # [B, *obs_shape] current observation
    key: jax.Array  # PRNG key for acting and env steps


PolicyFn = Callable[[Any, jax.Array, jax.Array], tuple[jax.Array, jax.Array, jax.Array]]
ValueFn = Callable[[Any, jax.Array], jax.Array]


def reset(env, env_params, key: jax.Array, num_envs: int) -> RolloutState:
    """Reset ``num_envs`` environments with independent keys."""
    key, key_reset = jax.random.split(key)
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key_reset, num_envs), env_params)
    return RolloutState(env_state=env_state, obs=obs, key=key)


def make_collector(env, env_params, policy_fn: PolicyFn, value_fn: ValueFn, num_steps: int):
    """Build ``collect(params, rollout_state) -> (rollout_state, Transition [num_steps, B])``.

    Args:
      env, env_params: a gymnax 1.0 environment (six-value, auto-resetting ``step``), e.g. from ``envs.make``.
      policy_fn: ``(params, obs [B, ...], key) -> (action [B, ...], log_prob [B], value [B])``.
      value_fn: ``(params, obs [N, ...]) -> value [N]``; used once per rollout, batched over all ``T * B`` final
        observations, to get ``final_value`` for truncated steps.
      num_steps: ``T``, environment steps per collect call.
    """
    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def env_step(carry: RolloutState, params):
        key, key_act, key_env = jax.random.split(carry.key, 3)
        action, log_prob, value = policy_fn(params, carry.obs, key_act)
        num_envs = carry.obs.shape[0]
        obs, env_state, reward, terminated, truncated, info = step_envs(
            jax.random.split(key_env, num_envs), carry.env_state, action, env_params
        )
        truncated = jnp.logical_and(truncated, jnp.logical_not(terminated))
        transition = Transition(
            obs=carry.obs,
            action=action,
            log_prob=log_prob,
            value=value,
            reward=reward.astype(jnp.float32),
            terminated=terminated,
            truncated=truncated,
            final_value=jnp.zeros_like(value),  # filled in after the scan, in one batched call
            episode_return=info["episode_return"],
            episode_length=info["episode_length"],
            episode_done=info["episode_done"],
        )
        return RolloutState(env_state=env_state, obs=obs, key=key), (transition, info["final_observation"])

    def collect(params, state: RolloutState) -> tuple[RolloutState, Transition]:
        state, (traj, final_obs) = jax.lax.scan(lambda c, _: env_step(c, params), state, None, length=num_steps)
        t, b = traj.reward.shape
        final_value = value_fn(params, final_obs.reshape((t * b,) + final_obs.shape[2:])).reshape(t, b)
        traj = traj._replace(final_value=jnp.where(traj.truncated, final_value, 0.0))
        return state, traj

    return collect
