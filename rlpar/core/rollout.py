"""The per-device experience collector: ``jax.vmap`` over environments inside ``jax.lax.scan`` over time.

Pure, device-agnostic and agent-agnostic: it knows neither how many devices exist nor which agent it serves. It
records what every agent needs (observation, action, reward, terminated, truncated, episode statistics), the
``extras`` pytree the agent's ``act`` returns, and, for agents that bootstrap truncated episodes, the agent's
``bootstrap`` of each truncated step's final observation. ``B`` below is the number of environments on this device.

Environments may report their own per-episode values (Craftax's achievements) as ``info["episode_metrics"]``, a
dict of name -> scalar per environment, read where a step ends an episode; ``episode_metrics`` averages them over
the episodes that ended, like the return.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from envs import adapters as env_adapters
from rlpar.core import platform
from rlpar.core.collectives import psum
from rlpar.core.platform import KEYS_UP_FRONT_MAX, UNROLL_ACCELERATOR  # noqa: F401 (re-exported)


class Transition(NamedTuple):
    """One time-major batch of experience; every leaf is ``[T, B, ...]``.

    ``terminated`` and ``truncated`` stay apart: a terminated step has no future; a truncated one (time limit) does,
    and ``final`` holds the agent's ``bootstrap`` of the observation that episode was cut at, for those steps.
    """

    obs: Any  # [T, B, *obs_shape] observation the action was chosen from (or a pytree of such leaves)
    action: jax.Array  # [T, B, *action_shape]
    reward: jax.Array  # [T, B] float32; [T, B, A] for a team env (one per agent, envs.marl_suite)
    terminated: jax.Array  # [T, B] bool, the episode reached a terminal state
    truncated: jax.Array  # [T, B] bool, the episode was cut by a time limit (and did not terminate)
    final: Any  # pytree [T, B, ...]: bootstrap(final observation) where truncated, zeros elsewhere; () without one
    episode_return: jax.Array  # [T, B] undiscounted return of the episode so far (final where episode_done)
    episode_length: jax.Array  # [T, B] steps of the episode so far (final where episode_done)
    episode_done: jax.Array  # [T, B] bool, this step ended an episode
    extras: Any  # pytree [T, B, ...] the agent's act returned (PPO: log-prob and value)
    # {name: [T, B] float32} the env's info["episode_metrics"] (values of the episode ending at that step, read
    # where episode_done); {} for envs without
    episode_metrics: Any = ()


@struct.dataclass
class RolloutState:
    """What the collector carries between calls, per device."""

    env_state: Any  # batched env state, leaves [B, ...]
    obs: Any  # [B, *obs_shape] current observation (a pytree of [B, ...] leaves for a team env's)
    carry: Any  # the agent's per-env recurrent state [B, ...] (() for feed-forward agents)
    key: jax.Array  # PRNG key for acting and env steps


class Experience(NamedTuple):
    """What ``agent.learn`` receives from one collect."""

    traj: Transition  # [T, B, ...]
    start: RolloutState  # the collector's state before the collect (e.g. the carry the sequences start from)
    end: RolloutState  # and after it: ``end.obs`` is the observation to bootstrap the last step from


ActFn = Callable[[Any, Any, jax.Array, jax.Array], tuple[jax.Array, Any, Any]]
BootstrapFn = Callable[[Any, Any, jax.Array], Any]


def reset(env, env_params, key: jax.Array, num_envs: int, carry: Any = ()) -> RolloutState:
    """Reset ``num_envs`` environments with independent keys; ``carry`` is the agent's initial carry ``[B, ...]``."""
    key, key_reset = jax.random.split(key)
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key_reset, num_envs), env_params)
    return RolloutState(env_state=env_state, obs=obs, carry=carry, key=key)


def episode_metrics(traj: Transition, axis_name: str | None) -> dict:
    """Counts and sums over the episodes that ended in ``traj``, summed over devices (the host divides). The env's
    own episode metrics are summed as ``episode/sum/NAME``."""
    done = traj.episode_done.astype(jnp.float32)
    env_metrics = {f"{EPISODE_SUM_PREFIX}{name}": jnp.sum(done * value)
                   for name, value in dict(traj.episode_metrics or {}).items()}
    return psum(
        {
            "episode/count": jnp.sum(done),
            "episode/return_sum": jnp.sum(done * traj.episode_return),
            "episode/length_sum": jnp.sum(done * traj.episode_length.astype(jnp.float32)),
            **env_metrics,
        },
        axis_name,
    )


EPISODE_SUM_PREFIX = "episode/sum/"  # + an env's episode metric name: its sum over the episodes that ended


def _rows(mask: jax.Array, x: jax.Array) -> jax.Array:
    """``mask`` (``[B]`` or ``[T, B]``) broadcast against ``x`` (``[B, ...]`` or ``[T, B, ...]``)."""
    return mask.reshape(mask.shape + (1,) * (len(x.shape) - mask.ndim))


def _select(mask: jax.Array, on_true: Any, on_false: Any) -> Any:
    """Per environment, ``on_true`` where ``mask [B]`` else ``on_false`` (pytrees of ``[B, ...]`` leaves)."""
    return jax.tree.map(lambda a, b: jnp.where(_rows(mask, a), a, b), on_true, on_false)


class _Pending(NamedTuple):
    """Per environment, the last truncated step's final observation (and carry) not yet bootstrapped."""

    obs: Any  # [B, *obs_shape] (a pytree of [B, ...] leaves for a team env's)
    carry: Any  # [B, ...] the agent's carry after that step
    held: jax.Array  # [B] bool: obs holds a truncated step's final observation
    spilled: jax.Array  # bool scalar: some environment was truncated twice in this collect (see make_collector)


def make_collector(env, env_params, act_fn: ActFn, num_steps: int, *, bootstrap: BootstrapFn | None = None,
                   initial_carry: Callable[[int], Any] | None = None, unroll: int = 0):
    """Build ``collect(agent_state, rollout_state) -> (rollout_state, Transition [num_steps, B])``.

    Args:
      env, env_params: a gymnax 1.0 environment (six-value, auto-resetting ``step``), e.g. from ``envs.make``.
      act_fn: ``(agent_state, carry, obs [B, ...], key) -> (action [B, ...], carry, extras)`` (``Agent.act``).
      num_steps: ``T``, environment steps per collect call.
      bootstrap: ``Agent.bootstrap`` or ``None``: ``(agent_state, carry, final_obs [B, ...]) -> pytree [B, ...]``.
      initial_carry: ``Agent.initial_carry``; where an episode ends the carry is reset to ``initial_carry(B)``.
      unroll: environment steps per iteration of the scan (``AgentConfig.collector_unroll``); 0: the backend's
        choice (``rlpar.core.platform.collector_unroll``, which a forced answer overrides either way).

    ``final`` without keeping every step's final observation: the scan carries, per environment, the final
    observation (and carry) of its latest truncated step, and one batched ``bootstrap`` call after the scan serves
    them all (storing ``[T, B, ...]`` final observations instead was measurably slower: ``docs/benchmarks.md``). An environment is truncated twice in one collect only when
    ``num_steps`` exceeds its time limit; then the earlier one is bootstrapped on the spot (under ``lax.cond``, so
    the usual step pays only for a select) and ``_place_spilled`` moves it to its step after the scan.
    """
    if bootstrap is not None:  # traced once: ``hold_final_observation`` asks its shapes and calls it (jit's cache)
        bootstrap = jax.jit(bootstrap)
    step_envs = _env_stepper(env)
    initial_carry = initial_carry or (lambda n: ())

    def env_step(agent_state, carry: tuple[RolloutState, _Pending], key_act: jax.Array, keys_env: jax.Array):
        # key_act: the acting key; keys_env [B]: one key per environment
        state, pending = carry
        action, agent_carry, extras = act_fn(agent_state, state.carry, state.obs, key_act)
        obs, env_state, reward, terminated, truncated, info = step_envs(keys_env, state.env_state, action, env_params)
        truncated = jnp.logical_and(truncated, jnp.logical_not(terminated))
        done = jnp.logical_or(terminated, truncated)
        final, pending = ((), pending) if bootstrap is None else hold_final_observation(
            bootstrap, agent_state, pending, truncated, info["final_observation"], agent_carry)
        transition = Transition(
            obs=state.obs, action=action, reward=reward.astype(jnp.float32), terminated=terminated,
            truncated=truncated, final=final, episode_return=info["episode_return"],
            episode_length=info["episode_length"], episode_done=info["episode_done"], extras=extras,
            episode_metrics={name: jnp.asarray(value, jnp.float32)
                             for name, value in info.get("episode_metrics", {}).items()},
        )
        # Where an episode ended the next observation starts a new one, and so does the agent's carry. Selecting
        # with the (per-device) done flags also keeps the carry's type per device under shard_map when an act_fn
        # returns a constant carry.
        agent_carry = _select(done, initial_carry(done.shape[0]), agent_carry)
        return (state.replace(env_state=env_state, obs=obs, carry=agent_carry), pending), transition

    def collect(agent_state, state: RolloutState) -> tuple[RolloutState, Transition]:
        key_next, key_steps = jax.random.split(state.key)
        first_obs = jax.tree.leaves(state.obs)[0]  # observations may be a pytree (a team env's), leaves [B, ...]
        num_envs = first_obs.shape[0]
        # zeros_like(state.obs) keeps the per-device type of the observations under shard_map, as the scan's
        # outputs have it (jax_auto_pcast, the default in JAX 0.10; test_backends runs this under shard_map).
        held = jnp.zeros_like(first_obs, bool).reshape(num_envs, -1).any(axis=1)
        pending = _Pending(jax.tree.map(jnp.zeros_like, state.obs), state.carry, held, held.any())
        if keys_up_front(num_steps * (1 + num_envs)):
            # Every step's keys in one vectorised split before the scan, not two small splits per step: on CPU
            # each threefry call is a loop of its own (docs/benchmarks.md).
            keys = jax.random.split(key_steps, num_steps * (1 + num_envs))
            keys = keys.reshape((num_steps, 1 + num_envs) + keys.shape[1:])
            step = lambda c, keys_t: env_step(agent_state, c, keys_t[0], keys_t[1:])  # noqa: E731
            xs = keys
        else:  # each step splits its own keys from its index: no [T, 1 + B] key array written and read back
            def step(carry, t):
                key_act, key_env = jax.random.split(jax.random.fold_in(key_steps, t))
                return env_step(agent_state, carry, key_act, jax.random.split(key_env, num_envs))

            xs = jnp.arange(num_steps)
        (state, pending), traj = jax.lax.scan(step, (state, pending), xs, unroll=scan_unroll(unroll))
        if bootstrap is not None:
            traj = traj._replace(final=_finals(bootstrap, agent_state, pending, traj))
        return state.replace(key=key_next), traj

    return collect


def _env_stepper(env):
    """``(keys [B], env_state [B, ...], action [B, ...], params) -> step outputs [B, ...]``: ``env.step`` under
    ``jax.vmap``; for one env, where ``platform.one_env_step`` says so and the env allows it
    (``envs.adapters.reset_when_done``), that env stepped unbatched, its reset computed only when its episode ended.
    Under a vmap over slots (seeds, sweeps, a population) "one env" is one per slot: the cond of the reset then
    becomes ``envs.adapters.reset_where_done``'s loop over the slots whose episode ended."""
    vmapped = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def step_envs(keys, env_state, action, params):
        one = env_adapters.reset_when_done(env) if keys.shape[0] == 1 and platform.one_env_step() else None
        if one is None:
            return vmapped(keys, env_state, action, params)
        first = lambda tree: jax.tree.map(lambda x: x[0], tree)  # noqa: E731
        out = one.step(keys[0], first(env_state), first(action), params)
        return jax.tree.map(lambda x: jnp.expand_dims(x, 0), out)

    return step_envs


# The collector's per-backend choices live in rlpar.core.platform, with the measurements behind them; these names are
# theirs, read when a collector is traced.
keys_up_front = platform.collector_keys_up_front  # (num_keys) -> split every step's keys before the scan?
set_keys_up_front = platform.set_keys_up_front  # force that for collectors traced from now on; None: by platform
scan_unroll = platform.collector_unroll  # (requested) -> environment steps per iteration of the collect's scan
set_unroll = platform.set_collector_unroll  # force that for collectors traced from now on; None: by platform


def hold_final_observation(bootstrap, agent_state, pending: _Pending, truncated, final_obs, agent_carry):
    """Hold this step's final observations; bootstrap the held ones now where an env is truncated again."""
    again = jnp.logical_and(truncated, pending.held)
    shapes = jax.eval_shape(bootstrap, agent_state, pending.carry, pending.obs)
    # Both branches select with ``again`` (per device), so they have the same types under shard_map even when
    # the bootstrap is a constant.
    zeros = lambda: jax.tree.map(lambda s: jnp.where(_rows(again, s), 0, jnp.zeros(s.shape, s.dtype)), shapes)
    spill = jax.lax.cond(
        jnp.any(again),
        lambda: _select(again, bootstrap(agent_state, pending.carry, pending.obs), zeros()),
        zeros,
    )
    pending = _Pending(
        obs=_select(truncated, final_obs, pending.obs),
        carry=_select(truncated, agent_carry, pending.carry),
        held=jnp.logical_or(pending.held, truncated),
        spilled=jnp.logical_or(pending.spilled, jnp.any(again)),
    )
    return spill, pending


def _finals(bootstrap, agent_state, pending: _Pending, traj: Transition):
    """``Transition.final [T, B, ...]``: the held final observations bootstrapped in one batched call, placed at
    their truncated steps (``_place_spilled`` when some env was truncated twice)."""
    # [B, ...], zero where an env holds nothing; selecting with the (per-device) held flags also keeps a
    # constant bootstrap's output per device under shard_map, as the reverse scan below needs.
    last = bootstrap(agent_state, pending.carry, pending.obs)
    last = jax.tree.map(lambda x: jnp.where(_rows(pending.held, x), x, jnp.zeros_like(x)), last)
    placed = lambda: jax.tree.map(lambda s, l: _place_spilled(s, traj.truncated, l), traj.final, last)
    plain = lambda: jax.tree.map(
        lambda s, l: jnp.where(_rows(traj.truncated, s), l[None], 0).astype(s.dtype), traj.final, last)
    return jax.lax.cond(pending.spilled, placed, plain)


def _place_spilled(spilled: jax.Array, truncated: jax.Array, last: jax.Array) -> jax.Array:
    """``final [T, B, ...]`` when environments were truncated more than once in a collect.

    ``spilled[t, b]`` holds the bootstrap of environment ``b``'s previous truncated step, emitted at its next one
    ``t``; ``last[b]`` that of its last. A reverse scan hands each value back to the truncated step it belongs to.
    """

    def back(value_next, inputs):
        spilled_t, truncated_t = inputs
        mask = _rows(truncated_t, spilled_t)
        return jnp.where(mask, spilled_t, value_next), jnp.where(mask, value_next, 0).astype(spilled_t.dtype)

    _, final = jax.lax.scan(back, last.astype(spilled.dtype), (spilled, truncated), reverse=True)
    return final
