"""Multi-agent probe environments whose right answers are known, in JaxMARL's API (``envs.marl_suite.TeamEnv``
adapts them like any JaxMARL env; pure JAX, so they need no jaxmarl). ``envs.make("envs.team_probes:Coordinate")``.

| class         | agents | obs  | actions | reward per agent                          | episode end               | known answer |
|---------------|--------|------|---------|-------------------------------------------|---------------------------|--------------|
| ``Coordinate``| 2      | [0.] | 2       | 1 if both agents pick the same action     | terminates after 1 step   | greedy actions agree; V = 1 |
| ``Truncated`` | 2      | [0.] | 1       | 1                                         | truncated after 5 steps   | V = 1 / (1 - gamma) for each agent |
| ``Masked``    | 2      | [0.] | 3       | 1 if the agent took its masked action     | terminates after 1 step   | the return is 0: a masked action is never taken |

``Truncated`` has a constant observation: a learner that treats its time limit as termination fits an average of
truncated returns, one that bootstraps fits ``1 / (1 - gamma)``. It declares ``time_limit`` (``TeamEnv`` reads
``state.step`` against it, as for JaxMARL's MPE, SMAX and Overcooked). ``Masked`` masks action 0 for ``agent_0``
and action 2 for ``agent_1`` (``get_avail_actions``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class ProbeState:
    step: jax.Array  # int32 steps taken in this episode


class _TeamProbe:
    num_actions = 2
    episode_steps = 1

    def __init__(self):
        self.agents = ["agent_0", "agent_1"]
        self.num_agents = 2

    def observation_space(self, agent: str):
        from gymnax.environments import spaces

        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def action_space(self, agent: str):
        from gymnax.environments import spaces

        return spaces.Discrete(self.num_actions)

    def _obs(self) -> dict:
        return {a: jnp.zeros(1, jnp.float32) for a in self.agents}

    def reset(self, key: jax.Array):
        return self._obs(), ProbeState(jnp.int32(0))

    def rewards(self, actions: dict) -> jax.Array:
        raise NotImplementedError

    def step_env(self, key, state: ProbeState, actions: dict):
        state = ProbeState(state.step + 1)
        done = state.step >= self.episode_steps
        reward = self.rewards(actions)
        dones = {a: done for a in self.agents}
        dones["__all__"] = done
        return self._obs(), state, {a: reward[i] for i, a in enumerate(self.agents)}, dones, {}


class Coordinate(_TeamProbe):
    """Both agents get 1 when they pick the same action, else 0; one step."""

    def rewards(self, actions):
        same = (actions["agent_0"] == actions["agent_1"]).astype(jnp.float32)
        return jnp.stack([same, same])


class Truncated(_TeamProbe):
    """Reward 1 per agent every step; cut by the time limit after 5 steps (never terminates on its own)."""

    num_actions = 1
    episode_steps = 5
    time_limit = 5

    def rewards(self, actions):
        return jnp.ones(2, jnp.float32)


class Masked(_TeamProbe):
    """Three actions; ``agent_0`` may not take 0, ``agent_1`` may not take 2; reward 1 for taking the masked one."""

    num_actions = 3
    MASKED = (0, 2)

    def get_avail_actions(self, state: ProbeState) -> dict:
        return {a: jnp.arange(3) != masked for a, masked in zip(self.agents, self.MASKED)}

    def rewards(self, actions):
        return jnp.stack([(actions[a] == masked).astype(jnp.float32) for a, masked in zip(self.agents, self.MASKED)])
