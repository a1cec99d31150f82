"""What the off-policy agents (``agents.dqn``, ``agents.sac``) share: an on-device replay buffer, the transitions
they store, the gradient steps on replayed minibatches, target networks, and the config fields for all of it.

Every device keeps its own buffer of its own environments' transitions, in the agent state (so checkpoints and
resumed runs include it), and samples its own minibatch; the learner ``pmean``-s the gradient, so with equal
minibatch sizes the update every device applies is one device's update on the union of the minibatches.

The buffer is flashbax's item buffer (``flashbax.make_item_buffer``): pure ``init`` and ``add`` functions over a pytree
state, which run unchanged under ``jax.pmap``, ``jax.shard_map`` and ``jax.vmap`` over seeds. It is a ring of
``capacity`` transitions; minibatches are drawn uniformly with replacement from those stored, their positions for all
of an update's gradient steps at once (``Replay.positions``, then ``Replay.take`` per step: ``gradient_steps``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from agents import checks
from rlpar.core.agent import AgentConfig, config_field
from rlpar.core.rollout import Experience


@dataclass(frozen=True)
class ReplayConfig(AgentConfig):
    """The fields of an agent that learns from replay; subclass it (``DQNConfig``, ``SACConfig``).

    Sizes are totals over all devices, like ``num_envs``: each device keeps ``buffer_size / devices`` transitions of
    its own environments and samples ``minibatch_size / devices`` of them per gradient step.
    """

    buffer_size: int = config_field(100_000, "replay capacity in transitions, over all devices (each keeps "
                                             "buffer_size / devices of its own environments'; the oldest go first)")
    minibatch_size: int = config_field(128, "transitions per gradient step, over all devices (each samples "
                                            "minibatch_size / devices from its own buffer)")
    learning_starts: int = config_field(1_000, "environment steps, over all devices, collected before the first "
                                               "gradient step (the warm-up fill)")
    gradient_steps: int = config_field(1, "gradient steps per update (per collect of num_envs x num_steps "
                                          "environment steps), each on a freshly sampled minibatch")
    tau: float = config_field(1.0, "target network update: target <- tau * online + (1 - tau) * target every "
                                   "target_update_every gradient steps (1: a copy; < 1: Polyak averaging)",
                              sweepable=True)
    target_update_every: int = config_field(1, "gradient steps between target network updates")

    def validate(self, num_devices: int = 1):
        super().validate(num_devices)
        checks.positive_ints(self, "buffer_size", "minibatch_size", "gradient_steps", "target_update_every")
        for name in ("buffer_size", "minibatch_size"):
            if getattr(self, name) % num_devices:
                raise ValueError(f"{name}={getattr(self, name)} is not divisible by the device count {num_devices}: "
                                 f"each device keeps and samples an equal share; use a multiple of {num_devices}")
        if self.buffer_size < self.minibatch_size:
            raise ValueError(f"buffer_size={self.buffer_size} is smaller than minibatch_size={self.minibatch_size}: "
                             f"use buffer_size >= {self.minibatch_size}")
        if self.buffer_size < self.batch_size:
            raise ValueError(f"buffer_size={self.buffer_size} is smaller than one collect (num_envs * num_steps = "
                             f"{self.batch_size}): use buffer_size >= {self.batch_size}")
        if not isinstance(self.learning_starts, int) or isinstance(self.learning_starts, bool) or not (
                0 <= self.learning_starts < self.num_updates * self.batch_size):
            raise ValueError(f"learning_starts={self.learning_starts!r}: must be an integer in [0, "
                             f"{self.num_updates * self.batch_size}) (the run's environment steps), or it never learns")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau={self.tau!r}: must be in (0, 1] (1: copy the online network; < 1: Polyak)")
        return self

    @property
    def first_learning_update(self) -> int:
        """The first update (counted from 1) that takes gradient steps: the one whose collect brings the steps
        collected to ``learning_starts`` or more (it adds them to the buffer first, then learns)."""
        return max(1, -(-self.learning_starts // self.batch_size))


class ReplayItem(NamedTuple):
    """One stored transition; leaves ``[N, ...]`` in a batch."""

    obs: jax.Array  # [N, *obs_shape]
    action: jax.Array  # [N, *action_shape]
    reward: jax.Array  # [N] float32
    next_obs: jax.Array  # [N, *obs_shape] the observation after the step; the final one where it was truncated
    terminated: jax.Array  # [N] bool: no future after this step (truncated steps have one: they bootstrap)


def final_observation(state, carry, final_obs: jax.Array) -> jax.Array:
    """``Agent.bootstrap`` of a replay agent: keep the observation a truncated episode was cut at, so the collector
    stores it in ``Transition.final`` (zeros elsewhere) and ``transitions`` can use it as that step's next one."""
    return final_obs


def transitions(experience: Experience) -> ReplayItem:
    """The collect ``experience.traj [T, B, ...]`` as ``T * B`` transitions (time-major order).

    Next observation: ``obs[t + 1]`` (``experience.end.obs`` after the last step); where a step was truncated the
    collector's next observation already starts a new episode, so it is the final observation instead
    (``traj.final``, kept by ``final_observation``). Where a step terminated the next observation is never used.
    """
    traj = experience.traj
    following = jnp.concatenate([traj.obs[1:], experience.end.obs[None]], axis=0)
    mask = traj.truncated.reshape(traj.truncated.shape + (1,) * (traj.obs.ndim - 2))
    next_obs = jnp.where(mask, traj.final, following)
    flat = lambda x: x.reshape((-1,) + x.shape[2:])
    return ReplayItem(flat(traj.obs), flat(traj.action), flat(traj.reward), flat(next_obs), flat(traj.terminated))


class Replay(NamedTuple):
    """A device's replay buffer: pure functions over its state, flashbax's ``TrajectoryBufferState`` (a pytree:
    ``experience`` with leaves ``[1, capacity, ...]``, ``current_index``, ``is_full``)."""

    init: Callable[[Any], Any]  # (one item, leaves without the [N] axis) -> empty state
    add: Callable[[Any, Any], Any]  # (state, items [N, ...]) -> state; the oldest items are overwritten when full
    sample: Callable[[Any, jax.Array], Any]  # (state, key) -> items [sample_size, ...], uniform with replacement
    size: Callable[[Any], jax.Array]  # state -> int32 items stored (at most capacity)
    # (state, key, n) -> int32 [n, sample_size]: n minibatches' positions in the ring, uniform over the stored items
    positions: Callable[[Any, jax.Array, int], jax.Array]
    take: Callable[[Any, jax.Array], Any]  # (state, positions [sample_size]) -> items [sample_size, ...]
    sample_size: int


def make_replay(capacity: int, sample_size: int) -> Replay:
    """A buffer of ``capacity`` items that samples ``sample_size`` at a time (both per device)."""
    import flashbax  # imported when a buffer is built: ``import agents`` needs no flashbax

    buffer = flashbax.make_item_buffer(max_length=capacity, min_length=1, sample_batch_size=sample_size,
                                       add_sequences=True, add_batches=False)

    def size(state) -> jax.Array:
        return jnp.where(state.is_full, capacity, state.current_index).astype(jnp.int32)

    def positions(state, key: jax.Array, n: int) -> jax.Array:
        # the stored items fill positions [0, size): the ring is full, or filled from 0 and not yet wrapped
        return jax.random.randint(key, (n, sample_size), 0, size(state))

    def take(state, at: jax.Array):
        return jax.tree.map(lambda x: x[0, at], state.experience)

    return Replay(init=buffer.init, add=buffer.add, sample=lambda state, key: take(state, positions(state, key, 1)[0]),
                  size=size, positions=positions, take=take, sample_size=sample_size)


def device_replay(config: ReplayConfig, axis_name: str | None) -> Replay:
    """This device's buffer for ``config``'s totals: ``buffer_size`` and ``minibatch_size`` split over the devices of
    ``axis_name`` (all of one when ``None``). Call it while tracing (in ``init`` or ``learn``): the device count is
    the axis size, which ``make`` does not know (evaluation builds an agent for any number of environments)."""
    num_devices = 1 if axis_name is None else jax.lax.axis_size(axis_name)
    return make_replay(config.buffer_size // num_devices, config.minibatch_size // num_devices)


def gradient_steps(step: Callable, carry: Any, replay: Replay, buffer: Any, key: jax.Array, num_steps: int,
                   learning: jax.Array, draw: Callable[[jax.Array, int], Any] | None = None) -> tuple[Any, Any]:
    """``num_steps`` calls of ``step(carry, minibatch, drawn) -> (carry, info)``, each on a minibatch sampled from
    ``buffer``, when ``learning`` (a bool scalar, the same on every device); otherwise ``carry`` as it is (the
    warm-up). Returns the carry and ``info`` averaged over the steps (zeros when not learning).

    ``drawn`` is the step's slice of ``draw(key, num_steps)`` (leaves ``[num_steps, ...]``: the random values every
    step needs, drawn for all of them at once), or the step's own key without ``draw``. Every draw happens before the
    loop, the minibatches' positions too: drawn inside it, on XLA:CPU, a draw was recomputed in every kernel that
    used it (XLA's fusion copies a chain of elementwise ops into each consumer: SAC's action noise went into many
    kernels a step), which made SAC's update slower and its program larger (docs/benchmarks.md, "Cold compiles at or
    under rejax's").
    """

    def learn(carry):
        key_positions, key_steps = jax.random.split(key)
        at = replay.positions(buffer, key_positions, num_steps)
        drawn = jax.random.split(key_steps, num_steps) if draw is None else draw(key_steps, num_steps)

        def one(c, xs):
            return step(c, replay.take(buffer, xs[0]), xs[1])

        carry, infos = jax.lax.scan(one, carry, (at, drawn))
        return carry, jax.tree.map(lambda x: jnp.mean(x, axis=0), infos)

    # jitted so that it is traced once: ``wait`` needs the shapes of its info, and ``jax.eval_shape`` of the same
    # jitted function reuses that trace (jit's cache) instead of tracing the gradient step a second time
    learn = jax.jit(learn)

    def wait(carry):
        shapes = jax.eval_shape(learn, carry)[1]
        # zeros typed like ``learning`` (per device under shard_map), as the other branch's outputs are
        zero = jnp.where(learning, 0.0, 0.0)
        return carry, jax.tree.map(lambda s: jnp.broadcast_to(zero.astype(s.dtype), s.shape), shapes)

    return jax.lax.cond(learning, learn, wait, carry)


def update_target(target: Any, online: Any, step: jax.Array, every: int, tau) -> Any:
    """``tau * online + (1 - tau) * target`` when gradient step ``step`` (counted from 1) is a multiple of
    ``every``, ``target`` otherwise; with ``tau = 1`` the result is ``online`` exactly."""
    due = step % every == 0
    return jax.tree.map(lambda t, o: jnp.where(due, tau * o + (1.0 - tau) * t, t), target, online)
