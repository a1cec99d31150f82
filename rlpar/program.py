"""The per-device training program the engine runs for any agent: collect, count episodes, learn.

``make_program(agent, ...)`` returns ``Program(init, update)``, pure functions of one device that take the device
axis as ``axis_name`` like everything per-device; ``rlpar.parallel`` maps them over devices, ``rlpar.seeds`` over
seeds and swept hyperparameters, and ``rlpar.runner`` runs chunks of updates on the host's behalf.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
from flax import struct

from rlpar import rollout
from rlpar.agent import Agent
from rlpar.rollout import Experience, RolloutState


@struct.dataclass
class TrainState:
    """Per-device state of a run: the agent's own state and the collector's (environments, observations, carry,
    acting key). Every leaf has this device's values; the agent's parameters are identical on every device."""

    agent: Any
    rollout: RolloutState


class Program(NamedTuple):
    init: Callable[[jax.Array, jax.Array], TrainState]  # (key_params shared by devices, key_device) -> state
    update: Callable[[TrainState], tuple[TrainState, dict]]  # one collect + learn; metrics reduced over devices


def make_program(agent: Agent, env, env_params, num_envs: int, num_steps: int, axis_name: str | None) -> Program:
    """The training program of ``agent`` on ``num_envs`` environments of this device, ``num_steps`` steps each per
    update. ``update``'s metrics are the agent's plus ``episode/count``, ``episode/return_sum`` and
    ``episode/length_sum`` over the episodes that ended during the collect, summed over devices."""
    collect = rollout.make_collector(env, env_params, agent.act, num_steps, bootstrap=agent.bootstrap,
                                     initial_carry=agent.initial_carry)

    def init(key_params: jax.Array, key_device: jax.Array) -> TrainState:
        key_env, key_agent = jax.random.split(key_device)
        agent_state = agent.init(key_params, key_agent)
        return TrainState(agent_state, rollout.reset(env, env_params, key_env, num_envs, agent.initial_carry(num_envs)))

    def update(state: TrainState) -> tuple[TrainState, dict]:
        end, traj = collect(state.agent, state.rollout)
        agent_state, metrics = agent.learn(state.agent, Experience(traj, state.rollout, end))
        return TrainState(agent_state, end), {**metrics, **rollout.episode_metrics(traj, axis_name)}

    return Program(init, update)
