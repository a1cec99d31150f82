"""The per-device PPO agent: act, learn from a collected batch (advantages, epochs of minibatch steps), and export
its policy, on the engine's contract (``rlpar.agent.Agent``).

Everything here is pure and takes ``axis_name`` (``None`` for one device). Gradients, loss statistics and
advantage-normalisation statistics are reduced over that axis, so every device applies the same update to the same
parameters. How the axis is provided (pmap, shard_map) is ``rlpar.core.parallel``'s business. Collectives are few (each
one is a rendezvous of the devices): per update, one for the advantage statistics of every minibatch of every epoch
(the shuffles are drawn up front; one per epoch where the batch is gathered packed, ``agents.shuffle.rows_of``), one
per minibatch step for the gradient, one for the loss statistics of all steps, and one for the observation
statistics.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from agents import platform, shuffle
from agents.advantages import gae, moments, normalize_with
from agents.networks import ActorCritic, make_network
from agents.normalization import RunningStats, init_stats, normalize_obs, update_stats
from agents.optim import make_optimizer, make_vector_optimizer
from agents.ppo.config import PPOConfig
from agents.ppo.loss import LossInfo, ppo_loss
from agents.spaces import single_agent
from rlpar.core.collectives import pmean
from rlpar.core.rollout import Experience


@struct.dataclass
class PPOState:
    """Per-device agent state; ``params``, ``opt_state`` and ``obs_stats`` are identical on every device."""

    params: Any
    opt_state: Any
    key: jax.Array  # this device's key for minibatch shuffling
    obs_stats: RunningStats  # observation statistics (unused unless normalize_obs)


class Batch(NamedTuple):
    """Flat training batch, every leaf ``[N, ...]``."""

    obs: jax.Array
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array


class PPO(NamedTuple):
    """The pure functions of one PPO agent on one device: the ``rlpar.agent.Agent`` contract, plus its pieces."""

    network: ActorCritic
    init: Callable[[jax.Array, jax.Array], PPOState]
    initial_carry: Callable[[int], Any]
    act: Callable  # (state, carry, obs, key) -> (action, carry, {"log_prob", "value"})
    bootstrap: Callable  # (state, carry, final_obs) -> V(final_obs) [B]
    learn: Callable[[PPOState, Experience], tuple[PPOState, dict]]
    policy: Callable  # (state, deterministic) -> (carry, obs, key) -> (action, carry)
    grad: Callable[[Any, Batch], tuple[Any, LossInfo]]  # minibatch gradient and loss statistics, pmean-ed
    # (params, opt_state, batch, key) -> (params, opt_state, per-step LossInfo [E, M]): the epochs of minibatch steps
    # learn() runs on a collected batch (observations already normalised when the config says so)
    fit: Callable[[Any, Any, Batch, jax.Array], tuple[Any, Any, LossInfo]]


def make_ppo(config: PPOConfig, env, env_params, num_envs: int, axis_name: str | None = None) -> PPO:
    """Build the per-device PPO functions for ``num_envs`` environments on this device."""
    single_agent("ppo", env)
    obs_shape = env.observation_space(env_params).shape
    network = make_network(
        env.observation_space(env_params), env.action_space(env_params), config.hidden_sizes, config.activation,
        config.torso,
    )
    tx = make_optimizer(config.lr, config.max_grad_norm, config.num_gradient_steps if config.anneal_lr else None)

    def prepare(obs_stats, obs):
        return normalize_obs(obs_stats, obs) if config.normalize_obs else obs

    def init(key_params: jax.Array, key_agent: jax.Array) -> PPOState:
        params = network.init(key_params, jnp.zeros((1, *obs_shape), jnp.float32))
        return PPOState(params=params, opt_state=tx.init(params), key=key_agent, obs_stats=init_stats(obs_shape))

    def act(state: PPOState, carry, obs, key):
        pi, value = network.apply(state.params, prepare(state.obs_stats, obs), method=ActorCritic.distribution)
        action = pi.sample(seed=key)
        return action, carry, {"log_prob": pi.log_prob(action), "value": value}

    def value_of(state: PPOState, obs):
        return network.apply(state.params, prepare(state.obs_stats, obs), method=ActorCritic.value)

    def policy(state: PPOState, deterministic: bool = True):
        def fn(carry, obs, key):
            pi, _ = network.apply(state.params, prepare(state.obs_stats, obs), method=ActorCritic.distribution)
            return (pi.mode() if deterministic else pi.sample(seed=key)), carry

        return fn

    grad, fit = make_fit(config, network, axis_name)

    def learn(state: PPOState, experience: Experience) -> tuple[PPOState, dict]:
        traj = experience.traj
        advantage, target = gae(
            traj.reward, traj.extras["value"], traj.terminated, traj.truncated, traj.final,
            value_of(state, experience.end.obs), config.gamma, config.gae_lambda,
        )
        flat = lambda x: x.reshape((-1,) + x.shape[2:])  # [T, B, ...] -> [T * B, ...]
        obs = flat(traj.obs)
        # Learn on observations normalised with the statistics the actions were taken with; refresh them after.
        batch = Batch(prepare(state.obs_stats, obs), flat(traj.action), flat(traj.extras["log_prob"]),
                      flat(traj.extras["value"]), flat(advantage), flat(target))
        key, key_fit = jax.random.split(state.key)
        params, opt_state, infos = fit(state.params, state.opt_state, batch, key_fit, step_rows=traj.reward.shape[1])
        # Loss statistics: the mean over steps of each device's values, then over devices (one collective).
        metrics = pmean({f"loss/{name}": jnp.mean(value) for name, value in infos._asdict().items()}, axis_name)
        obs_stats = update_stats(state.obs_stats, obs, axis_name) if config.normalize_obs else state.obs_stats
        return PPOState(params, opt_state, key, obs_stats), metrics

    return PPO(network=network, init=init, initial_carry=lambda n: (), act=act,
               bootstrap=lambda state, carry, obs: value_of(state, obs), learn=learn, policy=policy, grad=grad, fit=fit)


def make_fit(config: PPOConfig, network: ActorCritic, axis_name: str | None):
    """``(grad, fit)``: one minibatch's pmean-ed gradient, and the epochs of minibatch steps over a batch.

    ``network`` is an ``ActorCritic`` or a subclass whose ``__call__`` takes ``Batch.obs`` as it is (a pytree with
    ``[N, ...]`` leaves works: the team agents' inputs, ``agents.team``); ``config`` has ``PPOConfig``'s fields."""
    tx_vector = make_vector_optimizer(config.lr, config.max_grad_norm,
                                      config.num_gradient_steps if config.anneal_lr else None)
    tx = optax.flatten(tx_vector)  # = make_optimizer's: the same state on either path

    def loss_fn(params, batch: Batch, adv_moments: jax.Array):  # batch.obs is already normalised
        pi, value = network.apply(params, batch.obs, method=ActorCritic.distribution)
        advantage = normalize_with(batch.advantage, adv_moments) if config.normalize_advantages else batch.advantage
        return ppo_loss(
            pi.log_prob(batch.action), pi.entropy(), value, batch.log_prob, batch.value, advantage, batch.target,
            clip_eps=config.clip_eps, vf_clip_eps=config.clip_eps if config.clip_value else None,
            vf_coef=config.vf_coef, ent_coef=config.ent_coef,
        )

    def local_grad(loss, params, batch: Batch, adv_moments: jax.Array):
        """The gradient of ``loss`` pmean-ed over devices (one collective) and this device's loss statistics."""
        (_, info), grads = jax.value_and_grad(loss, has_aux=True)(params, batch, adv_moments)
        return pmean(grads, axis_name), info

    def grad(params, batch: Batch):
        grads, info = local_grad(loss_fn, params, batch, moments(batch.advantage, axis_name))
        return grads, pmean(info, axis_name)

    def fit(params, opt_state, batch: Batch, key: jax.Array, step_rows: int | None = None):
        """``update_epochs`` passes over ``batch`` in shuffled minibatches; returns new params, optimizer state and
        each step's (per-device) loss statistics ``[E, M]``. ``step_rows``: the rows each time step contributes to
        the flat batch (``flat index = t * step_rows + r``), which lets the shuffle move rows of one step in blocks
        (``agents.shuffle.block_size``); ``None``: row by row.

        On the XLA:CPU fast path (``agents.platform``) the steps run on the parameters raveled into one vector: the
        gradient arrives as one vector (one collective, one fused optimizer update) and the per-array slicing
        happens only in the forward pass. Elsewhere they run on the pytree. The optimizer state is the same either
        way (``agents.optim.make_optimizer``).
        """
        if platform.raveled_update():
            flat_params, unravel = ravel_pytree(params)
            step_loss, step_tx = (lambda v, b, m: loss_fn(unravel(v), b, m)), tx_vector
        else:
            flat_params, unravel = params, (lambda p: p)
            step_loss, step_tx = loss_fn, tx

        def minibatch_step(carry, xs):
            p, opt_state = carry
            minibatch, minibatch_moments = xs
            grads, info = local_grad(step_loss, p, split(minibatch), minibatch_moments)
            updates, opt_state = step_tx.update(grads, opt_state, p)
            return (jax.tree.map(jnp.add, p, updates), opt_state), info

        block = shuffle.rows_per_unit(config, batch.advantage.shape[0], step_rows)
        rows, split = shuffle.rows_of(batch, block)  # one packed array or the batch's leaves: what each epoch gathers
        packed = rows is not batch
        # Packed, the advantages' moments come from each epoch's own gather (one collective per epoch), not a
        # gather of their own up front.
        perms, adv_moments = epoch_shuffles(config, batch.advantage, key, axis_name, block, gather=not packed)

        def epoch(carry, xs):
            perm, epoch_moments = xs  # [N / block], [M, 2]
            minibatches = jax.tree.map(lambda x: shuffle.minibatches(x, perm, config.num_minibatches, block), rows)
            if packed and config.normalize_advantages:
                epoch_moments = moments(jax.vmap(split)(minibatches).advantage, axis_name, axis=-1)
            return jax.lax.scan(minibatch_step, carry, (minibatches, epoch_moments))

        (flat_params, opt_state), infos = jax.lax.scan(epoch, (flat_params, opt_state), (perms, adv_moments))
        return unravel(flat_params), opt_state, infos

    return grad, fit


def epoch_shuffles(config: PPOConfig, advantage: jax.Array, key: jax.Array, axis_name: str | None, block: int = 1,
                   gather: bool = True):
    """Every epoch's permutation of the batch's blocks ``[E, N / block]`` and every minibatch's advantage moments
    over all devices ``[E, M, 2]`` (one collective for all of them; zeros, and no collective, when advantages are not
    normalised or ``gather`` is off: the caller takes them from its own gathers)."""
    perms = shuffle.epoch_orders(key, advantage.shape[0], config.update_epochs, block)
    if config.normalize_advantages and gather:
        minibatch_advantages = jax.vmap(lambda p: shuffle.minibatches(advantage, p, config.num_minibatches, block))(perms)
        minibatch_advantages = minibatch_advantages.reshape(perms.shape[0], config.num_minibatches, -1)
        return perms, moments(minibatch_advantages, axis_name, axis=-1)
    return perms, jnp.zeros((config.update_epochs, config.num_minibatches, 2), jnp.float32)
