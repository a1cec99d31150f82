"""A2C (synchronous advantage actor-critic) written only against rlpar's public API: a user's agent in ~100 lines.

Train it from the command line, with every engine feature (devices, seeds, sweeps, checkpoints, evaluate)::

    python -m rlpar.train examples.a2c:SPEC --env CartPole-v1 --devices 2

or from Python::

    from examples import a2c
    result = a2c.train(a2c.A2CConfig(), "CartPole-v1", devices=2)   # or a2c.train() for the defaults

The engine collects ``num_steps`` steps of every environment with ``act`` and calls ``learn`` once per update;
``learn`` takes one gradient step on the whole batch, averaged over devices with ``pmean``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from agents.advantages import gae
from agents.networks import ActorCritic, make_network
from rlpar.agent import AgentConfig, AgentFunctions, AgentSpec, config_field, make_train
from rlpar.core.collectives import pmean
from rlpar.core.rollout import Experience


@dataclass(frozen=True)
class A2CConfig(AgentConfig):
    """seed, num_envs, num_steps, total_timesteps come from AgentConfig; every field is a CLI flag."""

    num_envs: int = config_field(16, "parallel environments in total, split evenly over the devices")
    num_steps: int = config_field(16, "environment steps per environment per update")
    total_timesteps: int = config_field(500_000, "environment steps to train for")
    lr: float = config_field(1e-3, "Adam learning rate", sweepable=True)
    gamma: float = config_field(0.99, "discount factor", sweepable=True)
    gae_lambda: float = config_field(1.0, "lambda of the advantage estimate (1: n-step returns)", sweepable=True)
    ent_coef: float = config_field(0.01, "entropy bonus coefficient", sweepable=True)
    vf_coef: float = config_field(0.5, "critic loss coefficient", sweepable=True)
    hidden_sizes: tuple[int, ...] = config_field((64, 64), "hidden layer widths")

    def validate(self, num_devices: int = 1) -> "A2CConfig":
        super().validate(num_devices)
        if not self.lr > 0 or not 0 <= self.gamma <= 1 or not 0 <= self.gae_lambda <= 1:
            raise ValueError(f"lr={self.lr}, gamma={self.gamma}, gae_lambda={self.gae_lambda}: need lr > 0 and "
                             "gamma, gae_lambda in [0, 1]")
        return self


@struct.dataclass
class A2CState:
    params: Any
    opt_state: Any


def make_a2c(config: A2CConfig, env, env_params, num_envs: int, axis_name: str | None) -> AgentFunctions:
    network = make_network(env.observation_space(env_params), env.action_space(env_params), config.hidden_sizes,
                           "tanh")
    tx = optax.adam(config.lr)
    obs_shape = env.observation_space(env_params).shape

    def init(key_params, key_agent):
        params = network.init(key_params, jnp.zeros((1, *obs_shape)))
        return A2CState(params, tx.init(params))

    def act(state, carry, obs, key):
        pi, value = network.apply(state.params, obs, method=ActorCritic.distribution)
        return pi.sample(seed=key), carry, {"value": value}

    def value(state, carry, obs):
        return network.apply(state.params, obs, method=ActorCritic.value)

    def policy(state, deterministic=True):
        def fn(carry, obs, key):
            pi, _ = network.apply(state.params, obs, method=ActorCritic.distribution)
            return (pi.mode() if deterministic else pi.sample(seed=key)), carry

        return fn

    def loss(params, traj, advantage, target):
        pi, v = network.apply(params, traj.obs, method=ActorCritic.distribution)
        policy_loss = -jnp.mean(pi.log_prob(traj.action) * advantage)
        value_loss = jnp.mean(jnp.square(v - target))
        entropy = jnp.mean(pi.entropy())
        total = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
        return total, {"loss/policy": policy_loss, "loss/value": value_loss, "loss/entropy": entropy}

    def learn(state, experience: Experience):
        traj = experience.traj
        advantage, target = gae(traj.reward, traj.extras["value"], traj.terminated, traj.truncated, traj.final,
                                value(state, (), experience.end.obs), config.gamma, config.gae_lambda)
        grads, metrics = jax.grad(loss, has_aux=True)(state.params, traj, advantage, target)
        grads, metrics = pmean((grads, metrics), axis_name)  # every device applies the same update
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        return A2CState(optax.apply_updates(state.params, updates), opt_state), metrics

    return AgentFunctions(init, lambda n: (), act, value, learn, policy)


SPEC = AgentSpec(name="a2c", config_cls=A2CConfig, make=make_a2c)
train = make_train(SPEC, default_env="CartPole-v1")  # train(config=None, env="CartPole-v1", **run_options)
