"""IPPO and MAPPO on one device: PPO's loss, GAE, optimizer and fit, with agents folded into the batch.

The engine hands a team env's experience with an agent axis: observations ``[T, B, A, ...]`` (a
``TeamObservation``), actions, rewards, log-probs and values ``[T, B, A]``, ``terminated`` and ``truncated``
``[T, B]`` for the team. ``learn`` repeats the team's flags for each agent, runs ``agents.advantages.gae`` on
``[T, B * A]`` (each agent its own reward stream; a truncated episode bootstraps from each agent's value of the final
observation) and hands ``[T * B * A]`` samples to PPO's fit (``agents.ppo.learner.make_fit``), which pmean-s
gradients and statistics over ``axis_name``. One network serves every agent; IPPO's critic reads the agent's own
observation, MAPPO's the team's world state. The recurrent variant (``gru_size > 0``) is ``agents.team.recurrent``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from agents.advantages import gae
from agents.networks import ActorCritic
from agents.optim import make_optimizer
from agents.ppo.learner import Batch, make_fit
from agents.spaces import team_agents
from agents.team.common import TeamAgentState, TeamPPO, example_inputs, per_agent, uses_masks
from agents.team.config import TeamConfig
from agents.team.network import TeamActorCritic, agent_inputs
from rlpar.core.collectives import pmean
from rlpar.core.rollout import Experience


def make_team_ppo(config: TeamConfig, env, env_params, num_envs: int, axis_name: str | None = None, *,
                  centralised: bool = False, name: str = "ippo") -> TeamPPO:
    """The per-device functions of IPPO (``centralised=False``) or MAPPO on a team env (``envs.marl_suite``)."""
    team_agents(name, env)
    use_masks = uses_masks(name, config, env)
    if config.gru_size:
        from agents.team.recurrent import make_recurrent_team_ppo

        return make_recurrent_team_ppo(config, env, num_envs, axis_name, centralised=centralised,
                                       use_masks=use_masks)
    num_agents = env.num_agents
    network = TeamActorCritic(env.num_actions, hidden_sizes=tuple(config.hidden_sizes), activation=config.activation,
                              use_agent_id=config.agent_id, centralised=centralised)
    tx = make_optimizer(config.lr, config.max_grad_norm, config.num_gradient_steps if config.anneal_lr else None)
    grad, fit = make_fit(config, network, axis_name)
    inputs = lambda team_obs: agent_inputs(team_obs, centralised, use_masks)

    def init(key_params, key_agent) -> TeamAgentState:
        params = network.init(key_params, example_inputs(env, centralised))
        return TeamAgentState(params, tx.init(params), key_agent)

    def act(state: TeamAgentState, carry, obs, key):
        pi, value = network.apply(state.params, inputs(obs), method=ActorCritic.distribution)
        action = pi.sample(seed=key)
        return action, carry, {"log_prob": pi.log_prob(action), "value": value}

    def value_of(state: TeamAgentState, obs):
        return network.apply(state.params, inputs(obs), method=TeamActorCritic.value)

    def policy(state: TeamAgentState, deterministic: bool = True):
        def fn(carry, obs, key):
            pi, _ = network.apply(state.params, inputs(obs), method=ActorCritic.distribution)
            return (pi.mode() if deterministic else pi.sample(seed=key)), carry

        return fn

    def learn(state: TeamAgentState, experience: Experience):
        traj = experience.traj
        steps = traj.reward.shape[0]
        streams = lambda x: x.reshape((steps, -1))  # [T, B, A] -> [T, B * A]
        advantage, target = gae(
            streams(traj.reward), streams(traj.extras["value"]), per_agent(traj.terminated, num_agents),
            per_agent(traj.truncated, num_agents), streams(traj.final),
            value_of(state, experience.end.obs).reshape(-1), config.gamma, config.gae_lambda,
        )
        count = traj.reward.size
        samples = lambda x: x.reshape((count,) + x.shape[3:])  # [T, B, A, ...] -> [T * B * A, ...]
        batch = Batch(jax.tree.map(samples, inputs(traj.obs)), samples(traj.action),
                      samples(traj.extras["log_prob"]), samples(traj.extras["value"]), advantage.reshape(-1),
                      target.reshape(-1))
        key, key_fit = jax.random.split(state.key)
        params, opt_state, infos = fit(state.params, state.opt_state, batch, key_fit, step_rows=count // steps)
        metrics = pmean({f"loss/{k}": jnp.mean(v) for k, v in infos._asdict().items()}, axis_name)
        return TeamAgentState(params, opt_state, key), metrics

    return TeamPPO(network, init, lambda n: (), act, lambda state, carry, obs: value_of(state, obs), learn, policy,
                   grad)
