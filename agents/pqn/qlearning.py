"""PQN's math as pure functions of arrays: Q(lambda) returns, the TD loss, epsilon-greedy acting, its schedule.

Shapes are time-major (``[T, B]``: ``T`` steps of ``B`` environments) or flat (``[N]``) as each docstring says.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def q_lambda_returns(
    reward: jax.Array,
    q_max: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    final_value: jax.Array,
    last_value: jax.Array,
    gamma: float,
    q_lambda: float,
) -> jax.Array:
    """Peng's Q(lambda) returns over a time-major batch, computed backwards; the regression targets of PQN.

    Shapes: ``reward, q_max, terminated, truncated, final_value`` are ``[T, B]``; ``last_value`` is ``[B]``.
    ``q_max[t] = max_a Q(obs_t, a)``, ``last_value = max_a Q(obs_T, a)`` (the observation after the last step),
    ``final_value[t] = max_a Q(final observation)`` where ``truncated[t]`` (zeros elsewhere).

    With ``V_{t+1}`` = ``q_max[t+1]`` (``last_value`` at ``t = T-1``) and ``G_T = last_value``::

        next_t = 0                                      if terminated_t   (no future)
               = final_value_t                          if truncated_t    (time limit: bootstrap from the final
                                                                           observation; G_{t+1} is the next episode's)
               = (1 - lambda) V_{t+1} + lambda G_{t+1}  otherwise
        G_t    = reward_t + gamma * next_t

    ``q_lambda = 0`` gives one-step Q-learning targets ``r + gamma max_a Q(s', a)``; ``q_lambda = 1`` the discounted
    rewards to the end of the episode or rollout, bootstrapped there. Returns ``G`` ``[T, B]``.
    """
    chex.assert_rank([reward, q_max, terminated, truncated, final_value, last_value], [2, 2, 2, 2, 2, 1])
    chex.assert_equal_shape([reward, q_max, terminated, truncated, final_value])
    next_value = jnp.concatenate([q_max[1:], last_value[None]], axis=0)  # V_{t+1}

    def backward(return_next, inputs):
        reward_t, value_next_t, terminated_t, truncated_t, final_t = inputs
        next_t = (1.0 - q_lambda) * value_next_t + q_lambda * return_next
        next_t = jnp.where(truncated_t, final_t, next_t)
        next_t = jnp.where(terminated_t, 0.0, next_t)
        return_t = reward_t + gamma * next_t
        return return_t, return_t

    inputs = (reward, next_value, terminated.astype(bool), truncated.astype(bool), final_value)
    _, returns = jax.lax.scan(backward, last_value, inputs, reverse=True)
    return returns


def td_loss(q_taken: jax.Array, target: jax.Array) -> jax.Array:
    """``0.5 * mean((Q(s, a) - target)^2)`` over ``[N]``; the target is a constant (no gradient flows into it)."""
    chex.assert_rank([q_taken, target], 1)
    return 0.5 * jnp.mean(jnp.square(q_taken - jax.lax.stop_gradient(target)))


def epsilon_schedule(update: jax.Array, num_updates: int, start: float, finish: float,
                     decay_fraction: float) -> jax.Array:
    """The exploration rate at ``update`` (a scalar count of updates done, 0-based): linear from ``start`` to
    ``finish`` over the first ``decay_fraction * num_updates`` updates, ``finish`` after (at once when that is 0)::

        epsilon = finish + (start - finish) * max(0, 1 - update / (decay_fraction * num_updates))
    """
    decay_updates = decay_fraction * num_updates
    progress = jnp.where(decay_updates > 0, update / jnp.maximum(decay_updates, 1e-12), 1.0)
    return finish + (start - finish) * jnp.maximum(0.0, 1.0 - progress)


def epsilon_greedy(q: jax.Array, epsilon: jax.Array, key: jax.Array) -> jax.Array:
    """Actions ``[B]`` (int32) for Q-values ``q`` ``[B, A]``: with probability ``epsilon`` (independently per row) a
    uniformly random action, else ``argmax_a q`` (the lowest index among ties)."""
    chex.assert_rank(q, 2)
    key_explore, key_action = jax.random.split(key)
    greedy = jnp.argmax(q, axis=-1).astype(jnp.int32)
    random = jax.random.randint(key_action, greedy.shape, 0, q.shape[-1], jnp.int32)
    explore = jax.random.uniform(key_explore, greedy.shape) < epsilon
    return jnp.where(explore, random, greedy)
