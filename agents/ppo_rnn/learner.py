"""The per-device recurrent PPO program (GRU policy), pure and taking ``axis_name`` like ``agents.ppo``.

Differences from feed-forward PPO: the collector carries the GRU state and a ``reset`` flag (True where the
observation starts a new episode, so the state is zeroed there); learning replays each environment's whole
``[T]`` sequence from the hidden state the rollout started with, so minibatches split environments, never time.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents.advantages import gae, normalize
from agents.ppo.learner import episode_metrics, make_optimizer
from agents.ppo.loss import LossInfo, ppo_loss
from agents.ppo_rnn.config import RecurrentPPOConfig
from agents.ppo_rnn.network import RecurrentActorCritic, distribution, unroll
from rlpar.collectives import pmean
from rlpar.rollout import Transition


@struct.dataclass
class RecurrentRollout:
    env_state: Any  # batched env state, leaves [B, ...]
    obs: jax.Array  # [B, obs_dim] current observation
    reset: jax.Array  # [B] bool, obs is the first of an episode (zero the GRU state before reading it)
    hidden: jax.Array  # [B, H] GRU state after the previous step
    key: jax.Array


@struct.dataclass
class RecurrentPPOState:
    params: Any
    opt_state: Any
    rollout: RecurrentRollout
    key: jax.Array  # minibatch shuffling
    update_step: jax.Array


class Sequences(NamedTuple):
    """Training data, time-major ``[T, B, ...]`` except ``hidden0 [B, H]`` (the state each sequence starts from)."""

    obs: jax.Array
    reset: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array
    hidden0: jax.Array


class RecurrentPPO(NamedTuple):
    network: RecurrentActorCritic
    init: Callable[[jax.Array, jax.Array], RecurrentPPOState]
    update: Callable[[RecurrentPPOState], tuple[RecurrentPPOState, dict]]


def make_ppo_rnn(config: RecurrentPPOConfig, env, env_params, num_local_envs: int,
                 axis_name: str | None = None) -> RecurrentPPO:
    obs_shape = env.observation_space(env_params).shape
    if not hasattr(env.action_space(env_params), "n"):
        raise ValueError(f"ppo_rnn supports discrete action spaces only; {env.name} has "
                         f"{env.action_space(env_params)}: use ppo for continuous actions")
    if len(obs_shape) != 1:
        raise ValueError(f"ppo_rnn takes vector observations; {env.name} gives shape {obs_shape}")
    network = RecurrentActorCritic(env.action_space(env_params).n, config.gru_size, tuple(config.hidden_sizes),
                                   config.activation)
    tx = make_optimizer(config)
    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def init(key_params, key_device) -> RecurrentPPOState:
        b = num_local_envs
        params = network.init(key_params, network.initial_hidden(1), jnp.zeros((1, *obs_shape)), jnp.ones(1, bool))
        key_env, key_act, key_learn = jax.random.split(key_device, 3)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key_env, b), env_params)
        rollout = RecurrentRollout(env_state, obs, jnp.ones(b, bool), network.initial_hidden(b), key_act)
        return RecurrentPPOState(params, tx.init(params), rollout, key_learn, jnp.int32(0))

    def env_step(params, carry: RecurrentRollout, _):
        key, key_act, key_env = jax.random.split(carry.key, 3)
        hidden, logits, value = network.apply(params, carry.hidden, carry.obs, carry.reset)
        pi = distribution(logits)
        action = pi.sample(seed=key_act)
        obs, env_state, reward, terminated, truncated, info = step_envs(
            jax.random.split(key_env, carry.obs.shape[0]), carry.env_state, action, env_params
        )
        truncated = truncated & ~terminated
        # V(final observation) continues the same episode: one more GRU step from the post-step hidden state.
        _, _, final_value = network.apply(params, hidden, info["final_observation"], jnp.zeros_like(truncated))
        done = terminated | truncated
        transition = Transition(
            obs=carry.obs, action=action, log_prob=pi.log_prob(action), value=value, reward=reward,
            terminated=terminated, truncated=truncated, final_value=jnp.where(truncated, final_value, 0.0),
            episode_return=info["episode_return"], episode_length=info["episode_length"],
            episode_done=info["episode_done"],
        )
        next_carry = RecurrentRollout(env_state, obs, done, hidden, key)
        return next_carry, (transition, carry.reset)

    def collect(params, rollout: RecurrentRollout):
        return jax.lax.scan(lambda c, x: env_step(params, c, x), rollout, None, length=config.num_steps)

    def loss_fn(params, seq: Sequences):
        _, logits, value = unroll(network, params, seq.hidden0, seq.obs, seq.reset)
        pi = distribution(logits)
        flat = lambda x: x.reshape(-1)
        advantage = normalize(flat(seq.advantage), axis_name) if config.normalize_advantages else flat(seq.advantage)
        return ppo_loss(
            flat(pi.log_prob(seq.action)), flat(pi.entropy()), flat(value), flat(seq.log_prob), flat(seq.value),
            advantage, flat(seq.target),
            clip_eps=config.clip_eps, vf_clip_eps=config.clip_eps if config.clip_value else None,
            vf_coef=config.vf_coef, ent_coef=config.ent_coef,
        )

    def update_minibatch(carry, seq: Sequences):
        params, opt_state = carry
        (_, info), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, seq)
        grads = pmean(grads, axis_name)  # the loss statistics are reduced once per update, in update()
        updates, opt_state = tx.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), info

    def update_epoch(carry, key_perm):
        params, opt_state, seq = carry
        perm = jax.random.permutation(key_perm, num_local_envs)
        m = config.num_minibatches

        def split(x, env_axis):  # [.., B, ..] -> [M, .., B/M, ..] along the env axis
            x = jnp.take(x, perm, axis=env_axis)
            x = jnp.moveaxis(x, env_axis, 0).reshape((m, -1) + x.shape[:env_axis] + x.shape[env_axis + 1:])
            return jnp.moveaxis(x, 1, env_axis + 1)

        minibatches = Sequences(*[split(x, 0 if name == "hidden0" else 1) for name, x in seq._asdict().items()])
        (params, opt_state), infos = jax.lax.scan(update_minibatch, (params, opt_state), minibatches)
        return (params, opt_state, seq), infos

    def update(state: RecurrentPPOState):
        hidden0 = state.rollout.hidden
        rollout, (traj, reset) = collect(state.params, state.rollout)
        _, _, last_value = network.apply(state.params, rollout.hidden, rollout.obs, rollout.reset)
        advantage, target = gae(traj.reward, traj.value, traj.terminated, traj.truncated, traj.final_value,
                                last_value, config.gamma, config.gae_lambda)
        seq = Sequences(traj.obs, reset, traj.action, traj.log_prob, traj.value, advantage, target, hidden0)
        key, *epoch_keys = jax.random.split(state.key, config.update_epochs + 1)
        (params, opt_state, _), infos = jax.lax.scan(update_epoch, (state.params, state.opt_state, seq),
                                                     jnp.stack(epoch_keys))
        metrics = pmean({f"loss/{name}": jnp.mean(value) for name, value in infos._asdict().items()}, axis_name)
        metrics.update(episode_metrics(traj, axis_name))
        return RecurrentPPOState(params, opt_state, rollout, key, state.update_step + 1), metrics

    return RecurrentPPO(network, init, update)
