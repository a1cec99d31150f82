"""The per-device PQN agent (parallel Q-learning, Gallici et al. 2024) on the engine's contract (``rlpar.agent``).

Each update the engine collects ``num_steps`` steps of every environment with epsilon-greedy ``act``; ``learn``
computes Q(lambda) targets backwards over that rollout (``agents.pqn.qlearning.q_lambda_returns``) and regresses
``Q(s, a)`` on them for ``update_epochs`` passes of ``num_minibatches`` minibatches. There is no replay buffer (the
rollout is used, then dropped) and no target network (targets come from the Q-values of the acting parameters,
which ``act`` records as ``extras["q_max"]``); the LayerNorm network keeps that stable.

Everything here is pure and takes ``axis_name`` (``None`` for one device). Gradients and metrics are ``pmean``-ed
over it, so every device applies the same update to the same parameters. Collectives per update: one per minibatch
step (the gradient) and one for the metrics.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from agents import platform, shuffle
from agents.optim import make_optimizer, make_vector_optimizer
from agents.pqn.config import PQNConfig
from agents.pqn.network import QNetwork, q_network
from agents.pqn.qlearning import epsilon_greedy, epsilon_schedule, q_lambda_returns, td_loss
from agents.spaces import discrete_actions
from rlpar.core.collectives import pmean
from rlpar.core.rollout import Experience


@struct.dataclass
class PQNState:
    """Per-device agent state; ``params``, ``opt_state`` and ``updates`` are identical on every device."""

    params: Any
    opt_state: Any
    key: jax.Array  # this device's key for minibatch shuffling
    updates: jax.Array  # int32 scalar: updates done, for the epsilon schedule


class Batch(NamedTuple):
    """Flat training batch, every leaf ``[N, ...]``."""

    obs: jax.Array
    action: jax.Array  # int32
    target: jax.Array  # Q(lambda) return


class PQN(NamedTuple):
    """The pure functions of one PQN agent on one device: the ``rlpar.agent.Agent`` contract, plus its pieces."""

    network: QNetwork
    init: Callable[[jax.Array, jax.Array], PQNState]
    initial_carry: Callable[[int], Any]
    act: Callable  # (state, carry, obs, key) -> (action, carry, {"q_max"}): epsilon-greedy at the scheduled epsilon
    bootstrap: Callable  # (state, carry, final_obs) -> max_a Q(final_obs, a) [B]
    learn: Callable[[PQNState, Experience], tuple[PQNState, dict]]
    policy: Callable  # (state, deterministic) -> (carry, obs, key) -> (action, carry)
    epsilon: Callable[[PQNState], jax.Array]  # the exploration rate act uses in this state
    grad: Callable[[Any, Batch], tuple[Any, dict]]  # minibatch gradient and loss statistics, pmean-ed
    # (params, opt_state, batch, key) -> (params, opt_state, per-step statistics [E, M]): the epochs of minibatch
    # steps learn() runs on a collected batch
    fit: Callable[[Any, Any, Batch, jax.Array], tuple[Any, Any, dict]]


def make_pqn(config: PQNConfig, env, env_params, num_envs: int, axis_name: str | None = None) -> PQN:
    """Build the per-device PQN functions for ``num_envs`` environments on this device. ``ValueError`` (before
    anything is traced) for an env whose actions are not ``Discrete(n)``."""
    num_actions = discrete_actions("pqn", env, env_params)
    obs_space = env.observation_space(env_params)
    network = q_network(obs_space, num_actions, config.hidden_sizes, config.activation, config.layer_norm)
    tx = make_optimizer(config.lr, config.max_grad_norm, config.num_gradient_steps if config.anneal_lr else None)

    def init(key_params: jax.Array, key_agent: jax.Array) -> PQNState:
        params = network.init(key_params, jnp.zeros((1, *obs_space.shape), jnp.float32))
        return PQNState(params=params, opt_state=tx.init(params), key=key_agent, updates=jnp.zeros((), jnp.int32))

    def epsilon(state: PQNState) -> jax.Array:
        return epsilon_schedule(state.updates, config.num_updates, config.epsilon_start, config.epsilon_finish,
                                config.epsilon_decay)

    def act(state: PQNState, carry, obs, key):
        q = network.apply(state.params, obs)
        return epsilon_greedy(q, epsilon(state), key), carry, {"q_max": jnp.max(q, axis=-1)}

    def q_max(state: PQNState, carry, obs):
        return jnp.max(network.apply(state.params, obs), axis=-1)

    def policy(state: PQNState, deterministic: bool = True):
        def fn(carry, obs, key):
            q = network.apply(state.params, obs)
            if deterministic:
                return jnp.argmax(q, axis=-1).astype(jnp.int32), carry
            return epsilon_greedy(q, config.epsilon_finish, key), carry

        return fn

    grad, fit = _make_fit(config, network, axis_name)

    def learn(state: PQNState, experience: Experience) -> tuple[PQNState, dict]:
        traj = experience.traj
        target = q_lambda_returns(
            traj.reward, traj.extras["q_max"], traj.terminated, traj.truncated, traj.final,
            q_max(state, (), experience.end.obs), config.gamma, config.q_lambda,
        )
        flat = lambda x: x.reshape((-1,) + x.shape[2:])  # [T, B, ...] -> [T * B, ...]
        batch = Batch(flat(traj.obs), flat(traj.action).astype(jnp.int32), flat(target))
        key, key_fit = jax.random.split(state.key)
        params, opt_state, stats = fit(state.params, state.opt_state, batch, key_fit, step_rows=traj.reward.shape[1])
        metrics = {name: jnp.mean(value) for name, value in stats.items()}
        metrics["explore/epsilon"] = epsilon(state)
        metrics["q/target"] = jnp.mean(target)
        return PQNState(params, opt_state, key, state.updates + 1), pmean(metrics, axis_name)

    return PQN(network=network, init=init, initial_carry=lambda n: (), act=act, bootstrap=q_max, learn=learn,
               policy=policy, epsilon=epsilon, grad=grad, fit=fit)


def _make_fit(config: PQNConfig, network: QNetwork, axis_name: str | None):
    """``(grad, fit)``: one minibatch's pmean-ed gradient, and the epochs of minibatch steps over a batch."""
    tx_vector = make_vector_optimizer(config.lr, config.max_grad_norm,
                                      config.num_gradient_steps if config.anneal_lr else None)
    tx = optax.flatten(tx_vector)  # = make_optimizer's: the same state on either path

    def loss_fn(params, batch: Batch):
        q = network.apply(params, batch.obs)
        q_taken = jnp.take_along_axis(q, batch.action[:, None], axis=-1)[:, 0]
        loss = td_loss(q_taken, batch.target)
        return loss, {"loss/total": loss, "q/taken": jnp.mean(q_taken)}  # total: the TD loss is the only term

    def local_grad(loss, params, batch: Batch):
        """The gradient of ``loss`` pmean-ed over devices (one collective) and this device's statistics."""
        (_, stats), grads = jax.value_and_grad(loss, has_aux=True)(params, batch)
        return pmean(grads, axis_name), stats

    def grad(params, batch: Batch):
        grads, stats = local_grad(loss_fn, params, batch)
        return grads, pmean(stats, axis_name)

    def fit(params, opt_state, batch: Batch, key: jax.Array, step_rows: int | None = None):
        """``update_epochs`` passes over ``batch`` in shuffled minibatches; returns new params, optimizer state and
        each step's (per-device) statistics ``[E, M]``. ``step_rows`` as PPO's fit (``agents.ppo.learner.make_fit``).
        On the XLA:CPU fast path (``agents.platform``) the steps run on the parameters raveled into one vector, as
        PPO's do; the optimizer state is the same either way."""
        if platform.raveled_update():
            flat_params, unravel = ravel_pytree(params)
            step_loss, step_tx = (lambda v, b: loss_fn(unravel(v), b)), tx_vector
        else:
            flat_params, unravel = params, (lambda p: p)
            step_loss, step_tx = loss_fn, tx

        def minibatch_step(carry, minibatch: Batch):
            p, opt_state = carry
            grads, stats = local_grad(step_loss, p, split(minibatch))
            updates, opt_state = step_tx.update(grads, opt_state, p)
            return (jax.tree.map(jnp.add, p, updates), opt_state), stats

        n = batch.target.shape[0]
        block = shuffle.rows_per_unit(config, n, step_rows)
        perms = shuffle.epoch_orders(key, n, config.update_epochs, block)

        rows, split = shuffle.rows_of(batch, block)  # one packed array or the batch's leaves: what each epoch gathers

        def epoch(carry, perm):
            minibatches = jax.tree.map(lambda x: shuffle.minibatches(x, perm, config.num_minibatches, block), rows)
            return jax.lax.scan(minibatch_step, carry, minibatches)

        (flat_params, opt_state), stats = jax.lax.scan(epoch, (flat_params, opt_state), perms)
        return unravel(flat_params), opt_state, stats

    return grad, fit
