"""The per-device recurrent PPO program (GRU policy), pure and taking ``axis_name`` like ``agents.ppo``.

Differences from feed-forward PPO: the GRU state is the agent's carry, which the engine's collector resets to zeros
where an episode ends; learning replays each environment's whole ``[T]`` sequence from the carry the collect started
with (resetting it where episodes start, as the collector did), so minibatches split environments, never time.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents.advantages import gae, normalize
from agents.optim import make_optimizer
from agents.ppo.loss import ppo_loss
from agents.ppo_rnn.config import RecurrentPPOConfig
from agents.ppo_rnn.network import RecurrentActorCritic, distribution, unroll
from agents.spaces import single_agent
from rlpar.core.collectives import pmean
from rlpar.core.rollout import Experience


@struct.dataclass
class RecurrentPPOState:
    params: Any
    opt_state: Any
    key: jax.Array  # minibatch shuffling


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
    """The ``rlpar.agent.Agent`` functions of recurrent PPO; the carry is the GRU state ``[B, H]``."""

    network: RecurrentActorCritic
    init: Callable[[jax.Array, jax.Array], RecurrentPPOState]
    initial_carry: Callable[[int], jax.Array]
    act: Callable
    bootstrap: Callable
    learn: Callable[[RecurrentPPOState, Experience], tuple[RecurrentPPOState, dict]]
    policy: Callable


def make_ppo_rnn(config: RecurrentPPOConfig, env, env_params, num_envs: int,
                 axis_name: str | None = None) -> RecurrentPPO:
    single_agent("ppo_rnn", env)
    obs_shape = env.observation_space(env_params).shape
    if not hasattr(env.action_space(env_params), "n"):
        raise ValueError(f"ppo_rnn supports discrete action spaces only; {env.name} has "
                         f"{env.action_space(env_params)}: use ppo for continuous actions")
    if len(obs_shape) != 1:
        raise ValueError(f"ppo_rnn takes vector observations; {env.name} gives shape {obs_shape}")
    network = RecurrentActorCritic(env.action_space(env_params).n, config.gru_size, tuple(config.hidden_sizes),
                                   config.activation)
    decay = config.num_updates * config.update_epochs * config.num_minibatches if config.anneal_lr else None
    tx = make_optimizer(config.lr, config.max_grad_norm, decay)

    def init(key_params, key_agent) -> RecurrentPPOState:
        params = network.init(key_params, network.initial_hidden(1), jnp.zeros((1, *obs_shape)), jnp.ones(1, bool))
        return RecurrentPPOState(params, tx.init(params), key_agent)

    def step(state: RecurrentPPOState, hidden, obs):
        """One GRU step from ``hidden`` (the collector has already reset it where an episode starts)."""
        return network.apply(state.params, hidden, obs, jnp.zeros(obs.shape[0], bool))

    def act(state: RecurrentPPOState, hidden, obs, key):
        hidden, logits, value = step(state, hidden, obs)
        pi = distribution(logits)
        action = pi.sample(seed=key)
        return action, hidden, {"log_prob": pi.log_prob(action), "value": value}

    def bootstrap(state: RecurrentPPOState, hidden, final_obs):
        # V(final observation) continues the same episode: one more GRU step from the hidden state after the step.
        return step(state, hidden, final_obs)[2]

    def policy(state: RecurrentPPOState, deterministic: bool = True):
        def fn(hidden, obs, key):
            hidden, logits, _ = step(state, hidden, obs)
            pi = distribution(logits)
            return (pi.mode() if deterministic else pi.sample(seed=key)), hidden

        return fn

    update_epoch = _make_update_epoch(config, network, tx, num_envs, axis_name)

    def learn(state: RecurrentPPOState, experience: Experience):
        traj, start, end = experience
        # obs[t] starts an episode where step t-1 ended one; at t = 0 the collector already reset the carry.
        reset = jnp.concatenate([jnp.zeros_like(traj.episode_done[:1]), traj.episode_done[:-1]])
        advantage, target = gae(traj.reward, traj.extras["value"], traj.terminated, traj.truncated, traj.final,
                                step(state, end.carry, end.obs)[2], config.gamma, config.gae_lambda)
        seq = Sequences(traj.obs, reset, traj.action, traj.extras["log_prob"], traj.extras["value"], advantage,
                        target, start.carry)
        key, *epoch_keys = jax.random.split(state.key, config.update_epochs + 1)
        (params, opt_state, _), infos = jax.lax.scan(update_epoch, (state.params, state.opt_state, seq),
                                                     jnp.stack(epoch_keys))
        metrics = pmean({f"loss/{name}": jnp.mean(value) for name, value in infos._asdict().items()}, axis_name)
        return RecurrentPPOState(params, opt_state, key), metrics

    return RecurrentPPO(network, init, network.initial_hidden, act, bootstrap, learn, policy)


def _make_update_epoch(config: RecurrentPPOConfig, network: RecurrentActorCritic, tx, num_envs: int,
                       axis_name: str | None):
    """``update_epoch((params, opt_state, seq), key) -> ((params, opt_state, seq), LossInfo [M])``: one pass over
    the sequences in minibatches of whole environments, gradients pmean-ed over devices."""

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
        perm = jax.random.permutation(key_perm, num_envs)
        m = config.num_minibatches

        def split(x, env_axis):  # [.., B, ..] -> [M, .., B/M, ..] along the env axis
            x = jnp.take(x, perm, axis=env_axis)
            x = jnp.moveaxis(x, env_axis, 0).reshape((m, -1) + x.shape[:env_axis] + x.shape[env_axis + 1:])
            return jnp.moveaxis(x, 1, env_axis + 1)

        minibatches = Sequences(*[split(x, 0 if name == "hidden0" else 1) for name, x in seq._asdict().items()])
        (params, opt_state), infos = jax.lax.scan(update_minibatch, (params, opt_state), minibatches)
        return (params, opt_state, seq), infos

    return update_epoch
