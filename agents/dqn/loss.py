"""The DQN objective as pure functions of arrays: double-Q targets and the squared TD error."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def double_q_targets(reward: jax.Array, terminated: jax.Array, q_next_online: jax.Array, q_next_target: jax.Array,
                     gamma, double: bool = True) -> jax.Array:
    """TD targets ``[N]`` from rewards ``[N]``, terminal flags ``[N]`` and both networks' ``Q(s', .)`` ``[N, A]``.

    ``y = r + gamma * (1 - terminated) * Q_target(s', a*)``, where ``a* = argmax_a Q_online(s', a)`` (double DQN:
    the online network picks the action, the target network values it) or ``argmax_a Q_target(s', a)`` when not
    ``double`` (plain DQN: ``max_a Q_target(s', a)``). A terminated step has no future; a truncated one does, and
    its ``s'`` is the observation the episode was cut at (``agents.replay.transitions``).
    """
    chex.assert_rank([reward, terminated, q_next_online, q_next_target], [1, 1, 2, 2])
    chooser = q_next_online if double else q_next_target
    best = jnp.argmax(chooser, axis=-1)
    q_next = jnp.take_along_axis(q_next_target, best[:, None], axis=-1)[:, 0]
    return reward + gamma * (1.0 - terminated.astype(reward.dtype)) * q_next


def td_loss(q: jax.Array, action: jax.Array, target: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(0.5 * mean((Q(s, a) - y)^2), Q(s, a) [N])`` for ``q [N, A]``, actions ``[N]`` and targets ``[N]``
    (the target is held fixed: no gradient flows into it)."""
    chex.assert_rank([q, action, target], [2, 1, 1])
    q_taken = jnp.take_along_axis(q, action[:, None].astype(jnp.int32), axis=-1)[:, 0]
    return 0.5 * jnp.mean(jnp.square(q_taken - jax.lax.stop_gradient(target))), q_taken


def linear_schedule(step, start, end, duration) -> jax.Array:
    """``start`` moving linearly to ``end`` over ``duration`` steps, then ``end``: e.g. (50, 1.0, 0.1, 100) -> 0.55.
    ``duration <= 0`` gives ``end`` from the start."""
    fraction = jnp.clip(jnp.asarray(step, jnp.float32) / jnp.maximum(duration, 1e-9), 0.0, 1.0)
    return jnp.where(duration > 0, start + fraction * (end - start), end)
