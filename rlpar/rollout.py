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


class _Pending(NamedTuple):
    """Per environment, the last truncated step's final observation not yet valued (carried through the scan)."""

    obs: jax.Array  # [B, *obs_shape]
    held: jax.Array  # [B] bool: obs holds a truncated step's final observation
    spilled: jax.Array  # bool scalar: some environment was truncated twice in this collect (see make_collector)


def make_collector(env, env_params, policy_fn: PolicyFn, value_fn: ValueFn, num_steps: int):
    """Build ``collect(params, rollout_state) -> (rollout_state, Transition [num_steps, B])``.

    Args:
      env, env_params: a gymnax 1.0 environment (six-value, auto-resetting ``step``), e.g. from ``envs.make``.
      policy_fn: ``(params, obs [B, ...], key) -> (action [B, ...], log_prob [B], value [B])``.
      value_fn: ``(params, obs [B, ...]) -> value [B]``; the critic at ``info["final_observation"]`` of the truncated
        steps, which gives ``final_value``.
      num_steps: ``T``, environment steps per collect call.

    ``final_value`` without keeping every step's final observation: the scan carries, per environment, the final
    observation of its latest truncated step (``[B, ...]``), and one batched ``value_fn`` call after the scan values
    them all. Keeping ``[T, B, ...]`` final observations instead cost about 10% of the collector's time at 1024 and
    more environments (``benchmarks/README.md``). An environment can be truncated twice in one collect only when
    ``num_steps`` exceeds its time limit; then the earlier observation is valued on the spot (under ``lax.cond``,
    so the usual step pays only for a select) and moved to its step by ``_place_spilled`` after the scan. (Under
    ``vmap``, e.g. several seeds at once, ``lax.cond`` becomes a select and that valuation runs every step, as the
    every-row valuation of earlier versions did.)
    """
    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def env_step(carry: tuple[RolloutState, _Pending], params, keys_t: jax.Array):
        # keys_t [1 + B]: the acting key, then one key per environment
        state, pending = carry
        action, log_prob, value = policy_fn(params, state.obs, keys_t[0])
        obs, env_state, reward, terminated, truncated, info = step_envs(keys_t[1:], state.env_state, action, env_params)
        truncated = jnp.logical_and(truncated, jnp.logical_not(terminated))
        again = jnp.logical_and(truncated, pending.held)  # a second truncation: value the held one now
        spill = jax.lax.cond(
            jnp.any(again),
            lambda: jnp.where(again, value_fn(params, pending.obs), 0.0).astype(value.dtype),
            lambda: jnp.zeros_like(value),
        )
        rows = truncated.reshape(truncated.shape + (1,) * (obs.ndim - 1))
        pending = _Pending(
            obs=jnp.where(rows, info["final_observation"], pending.obs),
            held=jnp.logical_or(pending.held, truncated),
            spilled=jnp.logical_or(pending.spilled, jnp.any(again)),
        )
        transition = Transition(
            obs=state.obs,
            action=action,
            log_prob=log_prob,
            value=value,
            reward=reward.astype(jnp.float32),
            terminated=terminated,
            truncated=truncated,
            final_value=spill,  # only spilled values here; the final values are placed after the scan
            episode_return=info["episode_return"],
            episode_length=info["episode_length"],
            episode_done=info["episode_done"],
        )
        return (state.replace(env_state=env_state, obs=obs), pending), transition

    def collect(params, state: RolloutState) -> tuple[RolloutState, Transition]:
        key_next, key_steps = jax.random.split(state.key)
        # Every step's keys in one vectorised split before the scan, not two small splits per step: on CPU each
        # threefry call is a loop of its own, and this took a quarter or more off the collector's time.
        num_envs = state.obs.shape[0]
        keys = jax.random.split(key_steps, num_steps * (1 + num_envs))
        keys = keys.reshape((num_steps, 1 + num_envs) + keys.shape[1:])
        # Built with zeros_like(state.obs) so that under shard_map the initial carry varies over the device axis, as
        # the scan's output does (zeros_like keeps its argument's varying type while jax_auto_pcast is on, the
        # default in JAX 0.10; test_backends runs this under shard_map).
        held = jnp.zeros_like(state.obs, bool).reshape(num_envs, -1).any(axis=1)
        pending = _Pending(jnp.zeros_like(state.obs), held, held.any())
        (state, pending), traj = jax.lax.scan(lambda c, k: env_step(c, params, k), (state, pending), keys)
        last = value_fn(params, pending.obs)  # [B]; rows that hold nothing are masked out below
        final_value = jax.lax.cond(
            pending.spilled,
            lambda: _place_spilled(traj.final_value, traj.truncated, last),
            lambda: jnp.where(traj.truncated, last[None, :], 0.0).astype(traj.value.dtype),
        )
        return state.replace(key=key_next), traj._replace(final_value=final_value)

    return collect


def _place_spilled(spilled: jax.Array, truncated: jax.Array, last: jax.Array) -> jax.Array:
    """``final_value [T, B]`` when environments were truncated more than once in a collect.

    ``spilled[t, b]`` holds the value of environment ``b``'s previous truncated step, emitted at its next one ``t``;
    ``last[b]`` the value of its last. A reverse scan hands each value back to the truncated step it belongs to.
    """

    def back(value_next, inputs):
        spilled_t, truncated_t = inputs
        return jnp.where(truncated_t, spilled_t, value_next), jnp.where(truncated_t, value_next, 0.0)

    _, final_value = jax.lax.scan(back, last.astype(spilled.dtype), (spilled, truncated), reverse=True)
    return final_value
