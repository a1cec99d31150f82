"""The per-device SAC agent on the engine's contract (``rlpar.agent.Agent``): a tanh-squashed Gaussian actor, twin
critics with Polyak-averaged targets, a learned temperature, and a replay buffer of this device's transitions in the
agent state.

Everything is pure and takes ``axis_name`` (``None`` for one device). A gradient step differentiates one sum of the
three losses (critic, actor, temperature), each seeing the others' parameters through ``stop_gradient``, so the
three gradients come from the same parameters and arrive in one ``pmean`` (one collective per step); the critics,
the actor and the temperature then take their own Adam steps. (The original SAC updates the critics first and
computes the actor's loss with the updated critics; this takes both from the parameters before the step, which
saves a collective per step.)
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from agents import replay as replay_lib
from agents.replay import ReplayItem
from agents.sac.config import SACConfig
from agents.sac.loss import soft_q_targets, squashed_gaussian
from agents.sac.networks import SquashedGaussianActor, TwinCritic
from agents.spaces import continuous_actions
from rlpar.core.collectives import pmean
from rlpar.core.rollout import Experience


@struct.dataclass
class SACParams:
    actor: Any
    critic: Any  # both critics
    log_alpha: jax.Array  # scalar: log of the entropy temperature


@struct.dataclass
class SACOptState:
    actor: Any
    critic: Any
    alpha: Any


@struct.dataclass
class SACState:
    """Per-device agent state. ``params``, ``target_critic``, ``opt_state`` and the counters are identical on every
    device; ``buffer`` and ``key`` are the device's own."""

    params: SACParams
    target_critic: Any
    opt_state: SACOptState
    buffer: Any  # this device's replay buffer (agents.replay.Replay state): its own environments' transitions
    key: jax.Array  # this device's key for sampling minibatches and actions in the losses
    updates: jax.Array  # int32, learn calls done (one per collect)
    steps: jax.Array  # int32, gradient steps done (the target critics' schedule)


class LossInfo(NamedTuple):
    total: jax.Array
    critic: jax.Array  # 0.5 * mean squared soft TD error, summed over the two critics
    actor: jax.Array  # mean of alpha * log pi(a | s) - min Q(s, a), a ~ pi(s)
    alpha_loss: jax.Array
    alpha: jax.Array
    entropy: jax.Array  # -mean log pi(a | s): the policy's entropy estimate, in the env's own action units
    q: jax.Array  # mean Q(s, a) of the minibatch's actions (first critic)


class Learning(NamedTuple):
    """What the gradient steps of one update carry from step to step."""

    params: SACParams
    target_critic: Any
    opt_state: SACOptState
    steps: jax.Array  # int32, gradient steps done


class SAC(NamedTuple):
    """The pure functions of one SAC agent on one device: the ``rlpar.agent.Agent`` contract, plus its pieces."""

    actor: SquashedGaussianActor
    critic: TwinCritic
    init: Callable[[jax.Array, jax.Array], SACState]
    initial_carry: Callable[[int], Any]
    act: Callable  # (state, carry, obs, key) -> (action, carry, ()): uniform before learning starts, then pi
    bootstrap: Callable  # (state, carry, final_obs) -> final_obs: kept as the next observation of truncated steps
    learn: Callable[[SACState, Experience], tuple[SACState, dict]]
    policy: Callable  # (state, deterministic) -> (carry, obs, key) -> (action, carry): tanh(mean) when deterministic
    # (params, target_critic, ReplayItem batch [N], noise [2, N, d]) -> (gradient pmean-ed over devices, LossInfo)
    grad: Callable
    to_env: Callable[[jax.Array], jax.Array]  # squashed action in [-1, 1] -> the action env.step takes


def make_sac(config: SACConfig, env, env_params, num_envs: int, axis_name: str | None = None) -> SAC:
    """Build the per-device SAC functions for ``num_envs`` environments on this device (``ValueError`` for an env
    without a bounded ``Box`` action space, naming the agents that fit it)."""
    bounds = continuous_actions("sac", env, env_params)
    obs_shape = env.observation_space(env_params).shape
    if len(obs_shape) != 1:
        raise ValueError(f"sac takes vector observations; {env.name} gives shape {tuple(obs_shape)}")
    action_dim = bounds.action_dim
    low, high = jnp.asarray(bounds.low), jnp.asarray(bounds.high)  # what env.step takes ([-1, 1] behind RescaleAction)
    log_scale = jnp.asarray(np.log((bounds.own_high - bounds.own_low) / 2.0))  # the env's own units, for log pi
    target_entropy = config.target_entropy_scale * action_dim
    actor = SquashedGaussianActor(action_dim, tuple(config.hidden_sizes), config.activation)
    critic = TwinCritic(tuple(config.hidden_sizes), config.activation)
    tx = SACOptState(optax.adam(config.actor_lr), optax.adam(config.critic_lr), optax.adam(config.alpha_lr))

    def to_env(squashed):
        return low + (squashed + 1.0) * 0.5 * (high - low)

    def init(key_params: jax.Array, key_agent: jax.Array) -> SACState:
        key_actor, key_critic = jax.random.split(key_params)
        obs, action = jnp.zeros((1, *obs_shape), jnp.float32), jnp.zeros((1, action_dim), jnp.float32)
        params = SACParams(actor.init(key_actor, obs), critic.init(key_critic, obs, action),
                           jnp.log(jnp.asarray(config.init_alpha, jnp.float32)))
        opt_state = SACOptState(*(t.init(p) for t, p in ((tx.actor, params.actor), (tx.critic, params.critic),
                                                         (tx.alpha, params.log_alpha))))
        item = ReplayItem(obs[0], action[0], jnp.zeros((), jnp.float32), obs[0], jnp.zeros((), bool))
        zero = jnp.zeros((), jnp.int32)
        buffer = replay_lib.device_replay(config, axis_name).init(item)
        return SACState(params, params.critic, opt_state, buffer, key_agent, zero, zero)

    def sample_action(actor_params, obs, noise):
        """``(action env.step takes, log pi in the env's own units)`` for ``noise ~ N(0, 1)`` shaped like the action."""
        mean, log_std = actor.apply(actor_params, obs)
        squashed, log_prob = squashed_gaussian(noise, mean, log_std, log_scale)
        return to_env(squashed), log_prob

    def noise_for(obs, key):
        return jax.random.normal(key, (*obs.shape[:-1], action_dim), jnp.float32)

    def act(state: SACState, carry, obs, key):
        key_policy, key_uniform = jax.random.split(key)
        action, _ = sample_action(state.params.actor, obs, noise_for(obs, key_policy))
        uniform = jax.random.uniform(key_uniform, action.shape, action.dtype, low, high)
        warming_up = state.updates.astype(jnp.float32) * config.batch_size < config.learning_starts
        return jnp.where(warming_up, uniform, action), carry, ()

    def policy(state: SACState, deterministic: bool = True):
        def fn(carry, obs, key):
            if deterministic:
                mean, _ = actor.apply(state.params.actor, obs)
                return to_env(jnp.tanh(mean)), carry
            return sample_action(state.params.actor, obs, noise_for(obs, key))[0], carry

        return fn

    def loss_fn(params: SACParams, target_critic, batch: ReplayItem, noise: jax.Array):
        alpha = jnp.exp(params.log_alpha)
        # Critics: soft TD targets from the target critics at a' ~ pi(s'), held fixed.
        action_next, log_prob_next = sample_action(params.actor, batch.next_obs, noise[0])
        q_next = jnp.min(critic.apply(target_critic, batch.next_obs, action_next), axis=0)
        target = jax.lax.stop_gradient(
            soft_q_targets(batch.reward, batch.terminated, q_next, log_prob_next, alpha, config.gamma))
        q = critic.apply(params.critic, batch.obs, batch.action)  # [2, N]
        critic_loss = 0.5 * jnp.sum(jnp.mean(jnp.square(q - target[None]), axis=-1))
        # Actor: maximise min Q(s, a) + alpha * entropy at a ~ pi(s); the critics are held fixed here.
        action_now, log_prob = sample_action(params.actor, batch.obs, noise[1])
        q_now = jnp.min(critic.apply(jax.lax.stop_gradient(params.critic), batch.obs, action_now), axis=0)
        actor_loss = jnp.mean(jax.lax.stop_gradient(alpha) * log_prob - q_now)
        # Temperature: up when the entropy is below its target, down when above.
        alpha_loss = -jnp.mean(params.log_alpha * jax.lax.stop_gradient(log_prob + target_entropy))
        alpha_loss = alpha_loss if config.learn_alpha else 0.0 * alpha_loss
        total = critic_loss + actor_loss + alpha_loss
        return total, LossInfo(total, critic_loss, actor_loss, alpha_loss, alpha, -jnp.mean(log_prob), jnp.mean(q[0]))

    def grad(params: SACParams, target_critic, batch: ReplayItem, noise: jax.Array):
        """This device's minibatch gradient of all three losses, ``pmean``-ed over devices (one collective), and
        this device's loss statistics. ``noise [2, N, d]`` draws the actions at ``s'`` and at ``s``."""
        grads, info = jax.grad(loss_fn, has_aux=True)(params, target_critic, batch, noise)
        return pmean(grads, axis_name), info

    def adam_step(part_tx, grads, opt_state, params):
        updates, opt_state = part_tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def gradient_step(carry: Learning, batch: ReplayItem, noise: jax.Array) -> tuple[Learning, LossInfo]:
        params, opt_state = carry.params, carry.opt_state
        grads, info = grad(params, carry.target_critic, batch, noise)
        actor_params, actor_opt = adam_step(tx.actor, grads.actor, opt_state.actor, params.actor)
        critic_params, critic_opt = adam_step(tx.critic, grads.critic, opt_state.critic, params.critic)
        log_alpha, alpha_opt = adam_step(tx.alpha, grads.log_alpha, opt_state.alpha, params.log_alpha)
        steps = carry.steps + 1
        target_critic = replay_lib.update_target(carry.target_critic, critic_params, steps,
                                                 config.target_update_every, config.tau)
        return Learning(SACParams(actor_params, critic_params, log_alpha), target_critic,
                        SACOptState(actor_opt, critic_opt, alpha_opt), steps), info

    def learn(state: SACState, experience: Experience) -> tuple[SACState, dict]:
        replay = replay_lib.device_replay(config, axis_name)
        buffer = replay.add(state.buffer, replay_lib.transitions(experience))
        updates = state.updates + 1
        key, key_steps = jax.random.split(state.key)
        # every step's noise [steps, 2, N, d] (at s' and at s) drawn at once, before the steps' loop
        draw = lambda k, n: jax.random.normal(k, (n, 2, replay.sample_size, action_dim), jnp.float32)
        learned, info = replay_lib.gradient_steps(
            gradient_step, Learning(state.params, state.target_critic, state.opt_state, state.steps), replay,
            buffer, key_steps, config.gradient_steps, updates >= config.first_learning_update, draw)
        metrics = pmean({"loss/total": info.total, "loss/critic": info.critic, "loss/actor": info.actor,
                         "loss/alpha": info.alpha_loss, "sac/alpha": info.alpha, "sac/entropy": info.entropy,
                         "q/mean": info.q}, axis_name)  # one collective for all steps' statistics
        return SACState(learned.params, learned.target_critic, learned.opt_state, buffer, key, updates,
                        learned.steps), metrics

    return SAC(actor=actor, critic=critic, init=init, initial_carry=lambda n: (), act=act,
               bootstrap=replay_lib.final_observation, learn=learn, policy=policy, grad=grad, to_env=to_env)
