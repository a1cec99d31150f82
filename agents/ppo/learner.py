"""The per-device PPO program: collect, advantages, epochs of minibatch updates.

Everything here is pure and takes ``axis_name`` (``None`` for one device). Gradients, loss statistics, episode
statistics and advantage-normalisation statistics are reduced over that axis, so every device applies the same
update to the same parameters. How the axis is provided (pmap, shard_map) is ``rlpar.parallel``'s business.

Collectives are few, because on CPU each one is a rendezvous of the device threads that adds about half the cost
of the small network's gradient itself: per update, one for the advantage statistics of every minibatch of every
epoch (the shuffles are drawn up front), one per minibatch step for the gradient, one for the loss statistics of all
steps, and one each for episode and observation statistics.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from agents.advantages import gae, moments, normalize_with
from agents.normalization import RunningStats, init_stats, normalize_obs, update_stats
from agents.ppo.config import PPOConfig
from agents.ppo.loss import LossInfo, ppo_loss
from agents.ppo.network import ActorCritic, make_network
from rlpar import rollout
from rlpar.collectives import pmean, psum
from rlpar.rollout import RolloutState, Transition


@struct.dataclass
class PPOState:
    """Per-device training state; ``params`` and ``opt_state`` are identical on every device."""

    params: Any
    opt_state: Any
    rollout: RolloutState  # this device's envs, current observations and acting key
    key: jax.Array  # this device's key for minibatch shuffling
    update_step: jax.Array  # updates done so far (int32 scalar)
    obs_stats: RunningStats  # observation statistics (identical on every device; unused unless normalize_obs)


class Batch(NamedTuple):
    """Flat training batch, every leaf ``[N, ...]``."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array


class PPO(NamedTuple):
    """The pure functions of one PPO agent on one device."""

    network: ActorCritic
    init: Callable[[jax.Array, jax.Array], PPOState]  # (key_params shared by devices, key_device) -> state
    update: Callable[[PPOState], tuple[PPOState, dict]]  # one collect + learn step, metrics reduced over devices
    grad: Callable[[Any, Batch], tuple[Any, LossInfo]]  # minibatch gradient, pmean-ed over devices
    # (params, opt_state, batch, key) -> (params, opt_state, per-step LossInfo [E, M]): the epochs of minibatch
    # steps ``update`` runs on a collected batch (observations already normalised when the config says so)
    learn: Callable[[Any, Any, Batch, jax.Array], tuple[Any, Any, LossInfo]]
    # (params, obs, key or None for greedy, obs_stats or None) -> action; pass the state's obs_stats when the
    # config normalises observations
    act: Callable[..., jax.Array]


def episode_metrics(traj: Transition, axis_name: str | None) -> dict:
    """Counts and sums over the episodes that ended in ``traj``, summed over devices (the host divides)."""
    done = traj.episode_done.astype(jnp.float32)
    return psum(
        {
            "episode/count": jnp.sum(done),
            "episode/return_sum": jnp.sum(done * traj.episode_return),
            "episode/length_sum": jnp.sum(done * traj.episode_length.astype(jnp.float32)),
        },
        axis_name,
    )


def make_vector_optimizer(config: PPOConfig) -> optax.GradientTransformation:
    """clip_by_global_norm -> Adam, with an optional linear decay of the learning rate to 0, for parameters raveled
    into one vector (``jax.flatten_util.ravel_pytree``)."""
    if config.anneal_lr:
        lr = optax.linear_schedule(config.lr, 0.0, config.num_gradient_steps)
    else:
        lr = config.lr
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(lr, eps=1e-5))


def make_optimizer(config: PPOConfig) -> optax.GradientTransformation:
    """``make_vector_optimizer`` for parameter pytrees (``optax.flatten``): its state is the vector optimizer's.

    The update runs on all parameters raveled into one vector: the same arithmetic, but a handful of fused kernels
    per gradient step instead of a few per parameter array, which is what a small MLP's update costs on CPU.
    """
    return optax.flatten(make_vector_optimizer(config))


def make_ppo(config: PPOConfig, env, env_params, num_local_envs: int, axis_name: str | None = None) -> PPO:
    """Build the per-device PPO functions for ``num_local_envs`` environments on this device."""
    obs_shape = env.observation_space(env_params).shape
    network = make_network(
        env.observation_space(env_params), env.action_space(env_params), config.hidden_sizes, config.activation
    )
    tx = make_optimizer(config)
    tx_vector = make_vector_optimizer(config)  # the same update on raveled parameters (used by learn())

    def prepare(obs_stats, obs):
        return normalize_obs(obs_stats, obs) if config.normalize_obs else obs

    # The collector passes ``acting`` through untouched: here it is ``(params, obs_stats)``.
    def policy_fn(acting, obs, key):
        params, obs_stats = acting
        pi, value = network.apply(params, prepare(obs_stats, obs), method=ActorCritic.distribution)
        action = pi.sample(seed=key)
        return action, pi.log_prob(action), value

    def value_fn(acting, obs):
        params, obs_stats = acting
        return network.apply(params, prepare(obs_stats, obs), method=ActorCritic.value)

    collect = rollout.make_collector(env, env_params, policy_fn, value_fn, config.num_steps)

    def init(key_params: jax.Array, key_device: jax.Array) -> PPOState:
        params = network.init(key_params, jnp.zeros((1, *obs_shape), jnp.float32))
        key_env, key_learn = jax.random.split(key_device)
        return PPOState(
            params=params,
            opt_state=tx.init(params),
            rollout=rollout.reset(env, env_params, key_env, num_local_envs),
            key=key_learn,
            update_step=jnp.int32(0),
            obs_stats=init_stats(obs_shape),
        )

    def advantages(params, traj: Transition, last_obs: jax.Array):
        last_value = value_fn(params, last_obs)
        return gae(
            traj.reward, traj.value, traj.terminated, traj.truncated, traj.final_value, last_value,
            config.gamma, config.gae_lambda,
        )

    def loss_fn(params, batch: Batch, adv_moments: jax.Array):  # batch.obs is already normalised (see update)
        pi, value = network.apply(params, batch.obs, method=ActorCritic.distribution)
        advantage = normalize_with(batch.advantage, adv_moments) if config.normalize_advantages else batch.advantage
        return ppo_loss(
            pi.log_prob(batch.action), pi.entropy(), value, batch.log_prob, batch.value, advantage, batch.target,
            clip_eps=config.clip_eps,
            vf_clip_eps=config.clip_eps if config.clip_value else None,
            vf_coef=config.vf_coef,
            ent_coef=config.ent_coef,
        )

    def local_grad(loss, params, batch: Batch, adv_moments: jax.Array):
        """The gradient of ``loss`` pmean-ed over devices (one collective) and this device's loss statistics."""
        (_, info), grads = jax.value_and_grad(loss, has_aux=True)(params, batch, adv_moments)
        return pmean(grads, axis_name), info

    def grad(params, batch: Batch):
        grads, info = local_grad(loss_fn, params, batch, moments(batch.advantage, axis_name))
        return grads, pmean(info, axis_name)

    def learn(params, opt_state, batch: Batch, key: jax.Array):
        """``update_epochs`` passes over ``batch`` in shuffled minibatches; returns new params, optimizer state and
        each step's (per-device) loss statistics ``[E, M]``.

        The steps run on the parameters raveled into one vector, so the gradient arrives as one vector (one
        collective, one fused optimizer update) and the per-array slicing happens only in the forward pass.
        """
        flat_params, unravel = ravel_pytree(params)
        flat_loss = lambda v, b, m: loss_fn(unravel(v), b, m)

        def minibatch_step(carry, minibatch):
            v, opt_state = carry
            grads, info = local_grad(flat_loss, v, *minibatch)
            updates, opt_state = tx_vector.update(grads, opt_state, v)
            return (v + updates, opt_state), info

        def epoch(carry, xs):
            perm, adv_moments = xs  # [N], [M, 2]
            minibatches = jax.tree.map(
                lambda x: jnp.take(x, perm, axis=0).reshape((config.num_minibatches, -1) + x.shape[1:]), batch
            )
            return jax.lax.scan(minibatch_step, carry, (minibatches, adv_moments))

        n = batch.advantage.shape[0]
        perms = jax.vmap(lambda k: jax.random.permutation(k, n))(jax.random.split(key, config.update_epochs))
        # Every minibatch's advantage moments over all devices, for all epochs at once: [E, M, 2], one collective.
        if config.normalize_advantages:
            minibatch_advantages = batch.advantage[perms].reshape(config.update_epochs, config.num_minibatches, -1)
            adv_moments = moments(minibatch_advantages, axis_name, axis=-1)
        else:  # unused by the loss: no collective for them
            adv_moments = jnp.zeros((config.update_epochs, config.num_minibatches, 2), jnp.float32)
        (flat_params, opt_state), infos = jax.lax.scan(epoch, (flat_params, opt_state), (perms, adv_moments))
        return unravel(flat_params), opt_state, infos

    def update(state: PPOState) -> tuple[PPOState, dict]:
        acting = (state.params, state.obs_stats)
        rollout_state, traj = collect(acting, state.rollout)
        advantage, target = advantages(acting, traj, rollout_state.obs)
        flat = lambda x: x.reshape((-1,) + x.shape[2:])  # [T, B, ...] -> [T * B, ...]
        obs = flat(traj.obs)
        # Learn on observations normalised with the statistics the actions were taken with; refresh them after.
        batch = Batch(prepare(state.obs_stats, obs), flat(traj.action), flat(traj.log_prob), flat(traj.value),
                      flat(advantage), flat(target))
        key, key_learn = jax.random.split(state.key)
        params, opt_state, infos = learn(state.params, state.opt_state, batch, key_learn)
        # Loss statistics: the mean over steps of each device's values, then over devices (one collective).
        metrics = pmean({f"loss/{name}": jnp.mean(value) for name, value in infos._asdict().items()}, axis_name)
        metrics.update(episode_metrics(traj, axis_name))
        obs_stats = update_stats(state.obs_stats, obs, axis_name) if config.normalize_obs else state.obs_stats
        new_state = PPOState(params, opt_state, rollout_state, key, state.update_step + 1, obs_stats)
        return new_state, metrics

    def act(params, obs, key=None, obs_stats=None):
        if config.normalize_obs:
            if obs_stats is None:
                raise ValueError("this config normalises observations: pass act(..., obs_stats=state.obs_stats)")
            obs = normalize_obs(obs_stats, obs)
        pi, _ = network.apply(params, obs, method=ActorCritic.distribution)
        return pi.mode() if key is None else pi.sample(seed=key)

    return PPO(network=network, init=init, update=update, grad=grad, learn=learn, act=act)
