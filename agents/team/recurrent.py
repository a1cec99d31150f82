"""Recurrent IPPO / MAPPO (``gru_size > 0``): the GRU states of every agent are the engine's carry ``[B, A, H]``.

Each (environment, agent) pair is one sequence: learning replays its ``[T]`` steps from the carry the collect
started with, resetting where episodes start (as the collector did), so minibatches split sequences, never time.
Loss, GAE, advantage normalisation and optimizer are PPO's (``agents.ppo.loss``, ``agents.advantages``,
``agents.optim``), the unroll is recurrent PPO's (``agents.ppo_rnn.network.unroll``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from agents.advantages import gae, normalize
from agents.networks import policy as categorical
from agents.optim import make_optimizer
from agents.ppo.loss import ppo_loss
from agents.ppo_rnn.network import unroll
from agents.team.common import TeamAgentState, TeamPPO, example_inputs, per_agent
from agents.team.config import TeamConfig
from agents.team.network import RecurrentTeamActorCritic, agent_inputs
from rlpar.core.collectives import pmean
from rlpar.core.rollout import Experience


class TeamSequences(NamedTuple):
    """Training data ``[T, S, ...]`` with ``S = B * A`` sequences, except ``hidden0`` (leaves ``[S, H]``)."""

    inputs: Any  # AgentInputs, leaves [T, S, ...]
    reset: jax.Array  # [T, S] bool: the step starts an episode
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    advantage: jax.Array
    target: jax.Array
    hidden0: Any  # (actor, critic) GRU states the sequences start from, [S, H] each


def make_recurrent_team_ppo(config: TeamConfig, env, num_envs: int, axis_name: str | None, *, centralised: bool,
                            use_masks: bool) -> TeamPPO:
    num_agents = env.num_agents
    network = RecurrentTeamActorCritic(env.num_actions, config.gru_size, tuple(config.hidden_sizes),
                                       config.activation, config.agent_id, centralised)
    tx = make_optimizer(config.lr, config.max_grad_norm, config.num_gradient_steps if config.anneal_lr else None)
    inputs = lambda team_obs: agent_inputs(team_obs, centralised, use_masks)
    agents_flat = lambda x: x.reshape((x.shape[0] * x.shape[1],) + x.shape[2:])  # [B, A, ...] -> [B * A, ...]

    def initial_carry(n: int):
        zeros = jnp.zeros((n, num_agents, config.gru_size), jnp.float32)
        return zeros, zeros

    def init(key_params, key_agent) -> TeamAgentState:
        params = network.init(key_params, network.initial_hidden(1), example_inputs(env, centralised),
                              jnp.zeros(1, bool))
        return TeamAgentState(params, tx.init(params), key_agent)

    def step(state: TeamAgentState, carry, obs):
        """One GRU step of every agent: carry ``[B, A, H]`` (already reset by the collector) -> logits, value."""
        b = obs.obs.shape[0]
        hidden, logits, value = network.apply(state.params, jax.tree.map(agents_flat, carry),
                                              jax.tree.map(agents_flat, inputs(obs)), jnp.zeros(b * num_agents, bool))
        back = lambda y: y.reshape((b, num_agents) + y.shape[1:])
        return jax.tree.map(back, hidden), back(logits), back(value)

    def act(state, carry, obs, key):
        carry, logits, value = step(state, carry, obs)
        pi = categorical(logits)
        action = pi.sample(seed=key)
        return action, carry, {"log_prob": pi.log_prob(action), "value": value}

    def bootstrap(state, carry, final_obs):  # V(final observation): one more step of the same episode
        return step(state, carry, final_obs)[2]

    def policy(state, deterministic: bool = True):
        def fn(carry, obs, key):
            carry, logits, _ = step(state, carry, obs)
            pi = categorical(logits)
            return (pi.mode() if deterministic else pi.sample(seed=key)), carry

        return fn

    update_epoch = _make_update_epoch(config, network, tx, axis_name)

    def learn(state: TeamAgentState, experience: Experience):
        traj, start, end = experience
        steps = traj.reward.shape[0]
        # [T, B, A, ...] -> [T, B * A, ...], sizes spelled out (IPPO's world state is empty: [T, B, A, 0])
        streams = lambda x: x.reshape((steps, x.shape[1] * x.shape[2]) + x.shape[3:])
        advantage, target = gae(
            streams(traj.reward), streams(traj.extras["value"]), per_agent(traj.terminated, num_agents),
            per_agent(traj.truncated, num_agents), streams(traj.final),
            step(state, end.carry, end.obs)[2].reshape(-1), config.gamma, config.gae_lambda,
        )
        # obs[t] starts an episode where step t-1 ended one; at t = 0 the collector already reset the carry
        reset = jnp.concatenate([jnp.zeros_like(traj.episode_done[:1]), traj.episode_done[:-1]])
        seq = TeamSequences(jax.tree.map(streams, inputs(traj.obs)), per_agent(reset, num_agents),
                            streams(traj.action), streams(traj.extras["log_prob"]), streams(traj.extras["value"]),
                            advantage, target, jax.tree.map(agents_flat, start.carry))
        key, *epoch_keys = jax.random.split(state.key, config.update_epochs + 1)
        (params, opt_state, _), infos = jax.lax.scan(update_epoch, (state.params, state.opt_state, seq),
                                                     jnp.stack(epoch_keys))
        metrics = pmean({f"loss/{k}": jnp.mean(v) for k, v in infos._asdict().items()}, axis_name)
        return TeamAgentState(params, opt_state, key), metrics

    return TeamPPO(network, init, initial_carry, act, bootstrap, learn, policy, grad=None)


def _make_update_epoch(config: TeamConfig, network: RecurrentTeamActorCritic, tx, axis_name: str | None):
    """``update_epoch((params, opt_state, seq), key) -> (..., LossInfo [M])``: one pass over the sequences in
    ``num_minibatches`` minibatches of whole sequences, gradients pmean-ed over devices."""
    m = config.num_minibatches

    def loss_fn(params, seq: TeamSequences):
        _, logits, value = unroll(network, params, seq.hidden0, seq.inputs, seq.reset)
        pi = categorical(logits)
        flat = lambda x: x.reshape(-1)
        advantage = normalize(flat(seq.advantage), axis_name) if config.normalize_advantages else flat(seq.advantage)
        return ppo_loss(flat(pi.log_prob(seq.action)), flat(pi.entropy()), flat(value), flat(seq.log_prob),
                        flat(seq.value), advantage, flat(seq.target), clip_eps=config.clip_eps,
                        vf_clip_eps=config.clip_eps if config.clip_value else None, vf_coef=config.vf_coef,
                        ent_coef=config.ent_coef)

    def update_minibatch(carry, seq: TeamSequences):
        params, opt_state = carry
        (_, info), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, seq)
        updates, opt_state = tx.update(pmean(grads, axis_name), opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), info

    def update_epoch(carry, key_perm):
        params, opt_state, seq = carry
        num_seq = seq.reset.shape[1]
        perm = jax.random.permutation(key_perm, num_seq)

        def split(x, axis):  # the sequence axis cut into [M, ..., S / M, ...], minibatches first
            x = jnp.moveaxis(jnp.take(x, perm, axis=axis), axis, 0)
            x = x.reshape((m, num_seq // m) + x.shape[1:])
            return jnp.moveaxis(x, 1, axis + 1)

        minibatches = TeamSequences(
            *[jax.tree.map(lambda x: split(x, 0 if name == "hidden0" else 1), value)
              for name, value in seq._asdict().items()])
        (params, opt_state), infos = jax.lax.scan(update_minibatch, (params, opt_state), minibatches)
        return (params, opt_state, seq), infos

    return update_epoch
