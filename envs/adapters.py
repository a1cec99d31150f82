"""Settling the ``step`` convention once, when an environment is wrapped.

The engine expects gymnax 1.0's six values, ``obs, state, reward, terminated, truncated, info``, with auto-reset and
``info["final_observation"]``. Environments written for gymnax 0.0.x (Craftax, most third-party gymnax envs) return
five, ``obs, state, reward, done, info``, where ``done`` mixes termination with the time limit. ``adapt_step``
counts the outputs of one abstractly traced step (``jax.eval_shape``: no computation, nothing per step) and wraps
five-value envs in ``FiveToSixStep``.

``reset_where_done`` is the auto-reset for environments whose reset costs far more than a step (Craftax builds a
world; brax initialises its physics): it resets only the environments that finished, also under ``jax.vmap``.
``reset_when_done`` gives an env made from gymnax's own the same for one env stepped unbatched (the collector's
choice at one env per device: ``rlpar.core.platform.one_env_step``).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from envs.wrappers import EpisodeStatistics, FlattenObservation, RescaleAction, Wrapper

# Where a gymnax 0.0.x-style env keeps its clock: (state field counting steps, params field holding the limit).
# gymnax 0.0.x uses the first, Craftax the second.
TIME_LIMIT_FIELDS = (("time", "max_steps_in_episode"), ("timestep", "max_timesteps"))
# info keys some five-value envs use to say "this done was the time limit" (brax-style wrappers: "truncation").
TRUNCATION_INFO_KEYS = ("truncated", "truncation")
_NO_LIMIT = 2**31 - 1  # a time limit no episode reaches (int32 max)


def time_limit(env: Any, params: Any) -> int | None:
    """Steps after which ``env`` truncates an episode, or ``None`` if it says nothing: a params field of
    ``TIME_LIMIT_FIELDS`` (gymnax's ``max_steps_in_episode``, Craftax's ``max_timesteps``), else an env attribute
    ``max_steps_in_episode`` (the brax adapter's; wrappers forward it)."""
    for _, field in TIME_LIMIT_FIELDS:
        if hasattr(params, field):
            return int(getattr(params, field))
    limit = getattr(env, "max_steps_in_episode", None)
    return None if limit is None else int(limit)


def _trace_step(env: Any, params: Any, step_fn) -> Any:
    """Abstract outputs (``jax.ShapeDtypeStruct`` leaves) of ``step_fn(key, state, action, params)`` one step after
    ``env.reset``, with an action sampled from the action space."""

    def one_step(key):
        key_reset, key_action, key_step = jax.random.split(key, 3)
        _, state = env.reset(key_reset, params)
        action = env.action_space(params).sample(key_action)
        return step_fn(key_step, state, action, params)

    return jax.eval_shape(one_step, jax.ShapeDtypeStruct((2,), jnp.uint32))


def adapt_step(env: Any, params: Any) -> Any:
    """``env`` itself if its ``step`` returns gymnax 1.0's six values, ``FiveToSixStep(env, params)`` if it returns
    gymnax 0.0.x's five.

    Raises:
      ValueError: if ``step`` returns anything else.
    """
    if isinstance(env, FiveToSixStep):  # adapted already (the suites adapt their envs themselves)
        return env
    out = _trace_step(env, params, env.step)
    count = len(out) if isinstance(out, tuple) else None
    if count == 6:
        return env
    if count == 5:
        return FiveToSixStep(env, params)
    raise ValueError(
        f"env {getattr(env, 'name', type(env).__name__)!r}: step returns {count if count else type(out).__name__} "
        "values; expected 6 (gymnax 1.0: obs, state, reward, terminated, truncated, info) "
        "or 5 (gymnax 0.0.x: obs, state, reward, done, info)"
    )


class FiveToSixStep(Wrapper):
    """Gives a gymnax 0.0.x-style env (five-value ``step``) gymnax 1.0's six-value, auto-resetting ``step``.

    The env must define ``step_env(key, state, action, params) -> (obs, state, reward, done, info)`` and
    ``reset_env(key, params) -> (obs, state)`` without auto-reset, as gymnax 0.0.x envs and Craftax do: the
    adapter steps with ``step_env`` so it sees the episode's last observation and state before resetting. Like
    gymnax 1.0's ``Environment.step`` it splits ``key`` into a step key and a reset key, resets where the episode
    ended, and puts ``terminated``, ``truncated`` and ``final_observation`` (the pre-reset observation) in ``info``.

    How ``done`` is split, decided once at wrap time from what the env exposes, first match wins:

    1. ``info`` has a ``"truncated"`` or ``"truncation"`` entry: ``truncated = done & info[key]``.
    2. the state has a step counter and the params a limit (``state.time`` / ``params.max_steps_in_episode``, or
       Craftax's ``state.timestep`` / ``params.max_timesteps``): a ``done`` with the pre-reset counter at the limit
       is truncated, unless the env's ``is_terminal(state, params)``, asked again with the limit lifted out of
       reach, says the state is terminal on its own (the pole fell on the last allowed step: terminated).
       Without a working ``is_terminal`` every ``done`` at the limit counts as truncated.
    3. nothing exposed: every ``done`` counts as ``terminated`` (the pre-1.0 reading; truncation is not
       bootstrapped).

    ``terminated = done & ~truncated``; the two are never both true. ``params`` (default: the env's
    ``default_params``) only serve to trace one step at wrap time; ``step`` takes its own.

    ``sparse_reset=False`` resets like gymnax: ``reset_env`` at every step, selected where ``done`` (cheap for
    small envs, and what vectorises best). ``sparse_reset=True`` calls ``reset_where_done`` instead, which runs
    ``reset_env`` only for the environments that finished: same results, for envs whose reset dwarfs their step.
    """

    def __init__(self, env: Any, params: Any = None, *, sparse_reset: bool = False):
        super().__init__(env)
        self._sparse_reset = sparse_reset
        params = env.default_params if params is None else params
        missing = [m for m in ("step_env", "reset_env") if not callable(getattr(env, m, None))]
        if missing:
            raise ValueError(
                f"env {getattr(env, 'name', type(env).__name__)!r} returns five values from step but has no "
                f"{' or '.join(missing)}: the five-value adapter needs step_env(key, state, action, params) and "
                "reset_env(key, params) without auto-reset, to see the observation before the reset"
            )
        _, state, _, _, info = _trace_step(env, params, env.step_env)
        self._info_key = next((k for k in TRUNCATION_INFO_KEYS if isinstance(info, dict) and k in info), None)
        self._clock = next(
            ((s, p) for s, p in TIME_LIMIT_FIELDS if hasattr(state, s) and hasattr(params, p)), None
        )
        self._natural_terminal = self._clock is not None and self._lifted_is_terminal_works(state, params)

    def _lifted_is_terminal_works(self, state: Any, params: Any) -> bool:
        try:
            jax.eval_shape(self._natural_is_terminal, state, params)
        except (NotImplementedError, AttributeError, TypeError, ValueError):
            return False
        return True

    def _natural_is_terminal(self, state: Any, params: Any) -> jax.Array:
        """``is_terminal`` with the time limit out of reach: True only for states terminal on their own."""
        lifted = dataclasses.replace(params, **{self._clock[1]: _NO_LIMIT})
        return jnp.asarray(self._env.is_terminal(state, lifted)).astype(bool)

    def _truncated(self, done: jax.Array, state: Any, info: dict, params: Any) -> jax.Array:
        """Which ``done`` steps are truncations, by the rule in the class docstring; ``state`` is pre-reset."""
        if self._info_key is not None:
            return done & jnp.asarray(info[self._info_key]).astype(bool)
        if self._clock is None:
            return jnp.zeros_like(done)
        state_field, params_field = self._clock
        at_limit = getattr(state, state_field) >= getattr(params, params_field)
        if self._natural_terminal:
            at_limit = at_limit & ~self._natural_is_terminal(state, params)
        return done & at_limit

    def step(self, key, state, action, params=None):
        params = self.default_params if params is None else params
        key_step, key_reset = jax.random.split(key)
        obs_st, state_st, reward, done, info = self._env.step_env(key_step, state, action, params)
        done = jnp.asarray(done).astype(bool)
        truncated = self._truncated(done, state_st, info, params)
        terminated = done & ~truncated
        if self._sparse_reset:
            obs, state = reset_where_done(self._env.reset_env, done, key_reset, params, obs_st, state_st)
        else:
            obs_re, state_re = self._env.reset_env(key_reset, params)
            state = jax.tree.map(lambda re, st: jax.lax.select(done, re, st), state_re, state_st)
            obs = jax.tree.map(lambda re, st: jax.lax.select(done, re, st), obs_re, obs_st)
        info = {**info, "terminated": terminated, "truncated": truncated, "final_observation": obs_st}
        return obs, state, reward, terminated, truncated, info


def reset_where_done(reset_env, done, key, params, obs, state):
    """``reset_env(key, params)`` if ``done`` else ``(obs, state)``, computing the reset only where it is used.

    Written for one environment (``done`` a scalar): a ``lax.cond``. Under ``jax.vmap`` a cond with a batched
    predicate becomes a select that computes both branches for every environment, i.e. a reset per environment per
    step. The batching rule below instead loops over the environments that are done (``lax.fori_loop`` with the
    count of them as bound, one unbatched ``reset_env(key[i])`` each, written into row ``i``), so a step pays for the
    resets of the episodes that ended in it. Each finished environment gets the reset of its own key, as with the
    select. Params batched along the axis (a vmap over env params) fall back to the select.
    """
    return _reset_where_done(reset_env)(done, key, params, obs, state)


def _reset_where_done(reset_env):
    def one(done, key, params, obs, state):
        def reset():
            # Selecting with ``done`` (true here) gives every leaf the type of the one it replaces: per-device
            # under shard_map even where the reset returns a constant, as both branches of a cond must.
            return jax.tree.map(lambda new, old: jnp.where(done, new, old), reset_env(key, params), (obs, state))

        return jax.lax.cond(done, reset, lambda: (obs, state))

    def select(done, key, params, obs, state):
        obs_re, state_re = reset_env(key, params)
        pick = lambda re, st: jax.lax.select(done, re, st)
        return jax.tree.map(pick, obs_re, obs), jax.tree.map(pick, state_re, state)

    def batched(axis_size, in_batched, done, key, params, obs, state):
        # in_batched: per argument, a pytree of bools saying which leaves carry the vmapped axis (in front)
        args = (done, key, params, obs, state)
        if any(jax.tree.leaves(in_batched[2])):
            in_axes = tuple(jax.tree.map(lambda b: 0 if b else None, flags) for flags in in_batched)
            out = jax.vmap(select, in_axes=in_axes)(*args)
            return out, jax.tree.map(lambda _: True, out)
        spread = lambda x, b: x if b else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))
        done, key, _, obs, state = (jax.tree.map(spread, a, f) for a, f in zip(args, in_batched))
        order = jnp.argsort(jnp.logical_not(done), stable=True)  # the done environments first

        def reset_one(j, rows):
            i = order[j]
            put = lambda xs, x: jax.lax.dynamic_update_index_in_dim(xs, jnp.asarray(x, xs.dtype), i, 0)
            return jax.tree.map(put, rows, reset_env(key[i], params))

        out = jax.lax.fori_loop(0, jnp.sum(done.astype(jnp.int32)), reset_one, (obs, state))
        return out, jax.tree.map(lambda _: True, out)

    fn = jax.custom_batching.custom_vmap(one)
    fn.def_vmap(batched)
    return fn


class ResetWhenDone(Wrapper):
    """gymnax 1.0's auto-resetting ``Environment.step`` (the same key split, ``is_truncated``, and ``info`` with
    ``terminated``, ``truncated`` and ``final_observation``) for an env that inherits it, with the reset under a
    ``lax.cond`` (``reset_where_done``): computed only at the steps that end an episode, where gymnax computes one at
    every step and selects it. For one env stepped unbatched; under ``jax.vmap`` ``reset_where_done``'s loop over
    the finished envs runs instead. The values are gymnax's up to float rounding (XLA fuses the step differently
    around a cond than around a select)."""

    def step(self, key, state, action, params=None):
        env = self._env
        params = env.default_params if params is None else params
        key_step, key_reset = jax.random.split(key)
        obs_st, state_st, reward, terminated, info = env.step_env(key_step, state, action, params)
        truncated = jnp.asarray(env.is_truncated(state_st, params))
        done = jnp.logical_or(terminated, truncated)
        obs, state = reset_where_done(env.reset_env, done, key_reset, params, obs_st, state_st)
        info = {**info, "terminated": terminated, "truncated": truncated, "final_observation": obs_st}
        return obs, state, reward, terminated, truncated, info


FORWARDING_WRAPPERS = (EpisodeStatistics, FlattenObservation, RescaleAction)  # each steps the env it wraps


def inherits_gymnax_step(env: Any) -> bool:
    """Whether ``env`` (not a wrapper) is a gymnax ``Environment`` that steps with gymnax's own ``step``."""
    from envs.deferred import import_gymnax

    base = import_gymnax().environments.environment.Environment
    return isinstance(env, base) and getattr(type(env), "step", None) is base.step


def reset_when_done(env: Any) -> Any | None:
    """``env`` (as ``envs.make`` returns it) with its gymnax core in ``ResetWhenDone``: a copy of each wrapper
    above it, the same env otherwise; ``None`` where the core has a ``step`` of its own (a five-value adapter, a
    suite's env, a user's override) or a wrapper between them is not one of ``FORWARDING_WRAPPERS``."""
    chain = []
    core = env
    while isinstance(core, Wrapper):
        if type(core) not in FORWARDING_WRAPPERS:
            return None
        chain.append(core)
        core = core._env
    if not inherits_gymnax_step(core):
        return None
    rebuilt = ResetWhenDone(core)
    for wrapper in reversed(chain):
        wrapper = copy.copy(wrapper)
        wrapper._env = rebuilt
        rebuilt = wrapper
    return rebuilt
