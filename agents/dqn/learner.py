"""The per-device DQN agent on the engine's contract (``rlpar.agent.Agent``): epsilon-greedy acting, a replay buffer
of this device's transitions in the agent state, double-Q gradient steps on replayed minibatches, a target network.

Everything is pure and takes ``axis_name`` (``None`` for one device). Each gradient step's gradient is
``pmean``-ed over that axis (one collective per step), so every device applies the same update to the same
parameters; the loss statistics of all steps are reduced once per update.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents import replay as replay_lib
from agents.dqn.config import DQNConfig
from agents.dqn.loss import double_q_targets, linear_schedule, td_loss
from agents.networks import Head
from agents.optim import make_optimizer
from agents.replay import ReplayItem
from agents.spaces import discrete_actions
from rlpar.core.collectives import pmean
from rlpar.core.rollout import Experience


@struct.dataclass
class DQNState:
    """Per-device agent state. ``params``, ``target_params``, ``opt_state`` and the counters are identical on every
    device; ``buffer`` and ``key`` are the device's own."""

    params: Any  # online Q-network
    target_params: Any  # target Q-network
    opt_state: Any
    buffer: Any  # this device's replay buffer (agents.replay.Replay state): its own environments' transitions
    key: jax.Array  # this device's key for sampling minibatches
    updates: jax.Array  # int32, learn calls done (one per collect)
    steps: jax.Array  # int32, gradient steps done (the target network's schedule)


class DQN(NamedTuple):
    """The pure functions of one DQN agent on one device: the ``rlpar.agent.Agent`` contract, plus its pieces."""

    network: Head  # obs [..., *obs_shape] -> Q-values [..., num_actions]
    init: Callable[[jax.Array, jax.Array], DQNState]
    initial_carry: Callable[[int], Any]
    act: Callable  # (state, carry, obs, key) -> (epsilon-greedy action, carry, ())
    bootstrap: Callable  # (state, carry, final_obs) -> final_obs: kept as the next observation of truncated steps
    learn: Callable[[DQNState, Experience], tuple[DQNState, dict]]
    policy: Callable  # (state, deterministic) -> (carry, obs, key) -> (action, carry): greedy when deterministic
    grad: Callable  # (params, target_params, ReplayItem batch) -> (gradient pmean-ed over devices, LossInfo)
    epsilon: Callable[[DQNState], jax.Array]  # the exploration probability the state acts with


class LossInfo(NamedTuple):
    td: jax.Array  # 0.5 * mean squared TD error
    q: jax.Array  # mean Q(s, a) of the minibatch


class Learning(NamedTuple):
    """What the gradient steps of one update carry from step to step."""

    params: Any
    target_params: Any
    opt_state: Any
    steps: jax.Array  # int32, gradient steps done


def make_dqn(config: DQNConfig, env, env_params, num_envs: int, axis_name: str | None = None) -> DQN:
    """Build the per-device DQN functions for ``num_envs`` environments on this device (``ValueError`` for an env
    without a ``Discrete`` action space, naming the agents that fit it)."""
    num_actions = discrete_actions("dqn", env, env_params)
    obs_space = env.observation_space(env_params)
    network = Head(tuple(config.hidden_sizes), num_actions, config.activation, 1.0, len(obs_space.shape) == 3)
    tx = make_optimizer(config.lr, config.max_grad_norm, config.num_gradient_steps if config.anneal_lr else None)

    def init(key_params: jax.Array, key_agent: jax.Array) -> DQNState:
        obs = jnp.zeros((1, *obs_space.shape), obs_space.dtype)
        params = network.init(key_params, obs)
        item = ReplayItem(obs[0], jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32), obs[0], jnp.zeros((), bool))
        zero = jnp.zeros((), jnp.int32)
        buffer = replay_lib.device_replay(config, axis_name).init(item)
        return DQNState(params, params, tx.init(params), buffer, key_agent, zero, zero)

    def epsilon(state: DQNState) -> jax.Array:
        env_steps = state.updates.astype(jnp.float32) * config.batch_size
        return linear_schedule(env_steps, config.epsilon_start, config.epsilon_end,
                               config.exploration_fraction * config.total_timesteps)

    def epsilon_greedy(params, obs, key, eps):
        greedy = jnp.argmax(network.apply(params, obs), axis=-1).astype(jnp.int32)
        key_explore, key_action = jax.random.split(key)
        explore = jax.random.uniform(key_explore, greedy.shape) < eps
        return jnp.where(explore, jax.random.randint(key_action, greedy.shape, 0, num_actions), greedy)

    def act(state: DQNState, carry, obs, key):
        return epsilon_greedy(state.params, obs, key, epsilon(state)), carry, ()

    def policy(state: DQNState, deterministic: bool = True):
        def fn(carry, obs, key):
            if deterministic:
                return jnp.argmax(network.apply(state.params, obs), axis=-1).astype(jnp.int32), carry
            return epsilon_greedy(state.params, obs, key, epsilon(state)), carry

        return fn

    def loss_fn(params, target_params, batch: ReplayItem):
        q_next_target = network.apply(target_params, batch.next_obs)
        q_next_online = network.apply(params, batch.next_obs) if config.double_q else q_next_target
        target = double_q_targets(batch.reward, batch.terminated, jax.lax.stop_gradient(q_next_online),
                                  q_next_target, config.gamma, config.double_q)
        loss, q_taken = td_loss(network.apply(params, batch.obs), batch.action, target)
        return loss, LossInfo(loss, jnp.mean(q_taken))

    def grad(params, target_params, batch: ReplayItem):
        """This device's minibatch gradient, ``pmean``-ed over devices, and this device's loss statistics."""
        grads, info = jax.grad(loss_fn, has_aux=True)(params, target_params, batch)
        return pmean(grads, axis_name), info

    def gradient_step(carry: Learning, batch: ReplayItem, key) -> tuple[Learning, LossInfo]:
        grads, info = grad(carry.params, carry.target_params, batch)
        updates, opt_state = tx.update(grads, carry.opt_state, carry.params)
        params = optax.apply_updates(carry.params, updates)
        steps = carry.steps + 1
        target_params = replay_lib.update_target(carry.target_params, params, steps, config.target_update_every,
                                                 config.tau)
        return Learning(params, target_params, opt_state, steps), info

    def learn(state: DQNState, experience: Experience) -> tuple[DQNState, dict]:
        replay = replay_lib.device_replay(config, axis_name)
        buffer = replay.add(state.buffer, replay_lib.transitions(experience))
        updates = state.updates + 1
        key, key_steps = jax.random.split(state.key)
        learned, info = replay_lib.gradient_steps(
            gradient_step, Learning(state.params, state.target_params, state.opt_state, state.steps), replay, buffer,
            key_steps, config.gradient_steps, updates >= config.first_learning_update)
        # One collective for all steps' statistics; epsilon is the same everywhere, reduced only to say so (shard_map)
        metrics = pmean({"loss/total": info.td, "q/mean": info.q, "explore/epsilon": epsilon(state)}, axis_name)
        return DQNState(learned.params, learned.target_params, learned.opt_state, buffer, key, updates,
                        learned.steps), metrics

    return DQN(network=network, init=init, initial_carry=lambda n: (), act=act,
               bootstrap=replay_lib.final_observation, learn=learn, policy=policy, grad=grad, epsilon=epsilon)
