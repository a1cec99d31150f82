"""Team agents for multi-agent envs (``envs.marl_suite``): IPPO (one network shared by every agent, each critic on
the agent's own observation) and MAPPO (the same actor, a centralised critic on the team's world state), each
feed-forward or recurrent (``gru_size``), on PPO's loss, GAE, optimizer and fit."""

from __future__ import annotations

from agents.team.common import TeamAgentState, TeamPPO
from agents.team.config import TeamConfig
from agents.team.learner import make_team_ppo
from agents.team.network import AgentInputs, TeamActorCritic
from rlpar.core.agent import AgentSpec
from rlpar.run.runner import make_train


def make_ippo(config, env, env_params, num_envs, axis_name=None):
    return make_team_ppo(config, env, env_params, num_envs, axis_name, centralised=False, name="ippo")


def make_mappo(config, env, env_params, num_envs, axis_name=None):
    return make_team_ppo(config, env, env_params, num_envs, axis_name, centralised=True, name="mappo")


IPPO_SPEC = AgentSpec(name="ippo", config_cls=TeamConfig, make=make_ippo)
MAPPO_SPEC = AgentSpec(name="mappo", config_cls=TeamConfig, make=make_mappo)

train_ippo = make_train(IPPO_SPEC, default_env="marl-MPE_simple_spread_v3")
train_mappo = make_train(MAPPO_SPEC, default_env="marl-MPE_simple_spread_v3")

__all__ = ["IPPO_SPEC", "MAPPO_SPEC", "AgentInputs", "TeamActorCritic", "TeamAgentState", "TeamConfig", "TeamPPO",
           "make_ippo", "make_mappo", "make_team_ppo", "train_ippo", "train_mappo"]
