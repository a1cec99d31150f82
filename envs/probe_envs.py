"""The probe environments' classes (gymnax 1.0 subclasses, so importing this module imports gymnax).

Use them through ``envs.make("Probe-...")`` or ``envs.PROBES``; ``envs.probes`` describes them and imports this
module on first use.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from envs.deferred import import_gymnax

import_gymnax()  # before the gymnax imports below: they would otherwise import its plotting libraries eagerly
from gymnax.environments import environment, spaces  # noqa: E402


@struct.dataclass
class ProbeState(environment.EnvState):
    obs: jax.Array


@struct.dataclass
class ProbeParams(environment.EnvParams):
    max_steps_in_episode: int = 5


class _Probe(environment.Environment):
    """Shared plumbing: a scalar observation, ``num_actions`` discrete actions (or, with ``continuous``, one
    continuous action in ``[-2, 2]``: the agent acts in ``[-1, 1]`` behind ``envs.RescaleAction``)."""

    n_actions = 1
    terminates = True  # episode ends after one step
    continuous = False

    @property
    def default_params(self) -> ProbeParams:
        return ProbeParams()

    def _sample_obs(self, key: jax.Array) -> jax.Array:
        return jnp.zeros((1,), jnp.float32)

    def _reward(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        return jnp.float32(1.0)

    def reset_env(self, key, params):
        obs = self._sample_obs(key)
        return obs, ProbeState(time=0, obs=obs)

    def step_env(self, key, state, action, params):
        reward = self._reward(state.obs, action)
        new_obs = self._sample_obs(key)
        new_state = ProbeState(time=state.time + 1, obs=new_obs)
        terminated = jnp.bool_(self.terminates)
        return new_obs, new_state, reward, terminated, {}

    def is_terminated(self, state, params):
        return jnp.bool_(self.terminates)

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def num_actions(self) -> int:
        return self.n_actions

    def action_space(self, params=None):
        if self.continuous:
            return spaces.Box(-2.0, 2.0, (1,), jnp.float32)
        return spaces.Discrete(self.n_actions)

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)


class OneStep(_Probe):
    """Reward 1, then the episode terminates: V = 1."""


class ObsReward(_Probe):
    """Observation is +1 or -1 at random; reward equals it; terminates: V(s) = obs."""

    def _sample_obs(self, key):
        return jnp.where(jax.random.bernoulli(key), 1.0, -1.0).astype(jnp.float32)[None]

    def _reward(self, obs, action):
        return obs[0]


class Truncated(_Probe):
    """Reward 1 forever, cut by the 5-step time limit (truncation, not termination): V = 1 / (1 - gamma)."""

    terminates = False


class Policy(_Probe):
    """Observation +1 or -1; action 1 pays 1 on +1, action 0 pays 1 on -1; terminates: optimal V = 1."""

    n_actions = 2

    def _sample_obs(self, key):
        return jnp.where(jax.random.bernoulli(key), 1.0, -1.0).astype(jnp.float32)[None]

    def _reward(self, obs, action):
        return jnp.where(action == (obs[0] > 0).astype(action.dtype), 1.0, 0.0).astype(jnp.float32)


class TwoStep(_Probe):
    """Observation [0], reward 0.5; then observation [1], reward 1, and the episode terminates.

    Q(s0) = 0.5 + gamma * 1 (bootstrapping one step), Q(s1) = 1 (a terminal step does not bootstrap).
    """

    def _obs(self, time):
        return jnp.minimum(jnp.asarray(time, jnp.float32), 1.0)[None]  # the terminal observation is [1.] too

    def reset_env(self, key, params):
        return self._obs(0), ProbeState(time=0, obs=self._obs(0))

    def step_env(self, key, state, action, params):
        reward = jnp.where(state.time == 0, 0.5, 1.0).astype(jnp.float32)
        time = state.time + 1
        return self._obs(time), ProbeState(time=time, obs=self._obs(time)), reward, time >= 2, {}

    def is_terminated(self, state, params):
        return state.time >= 2


class ContinuousTwoStep(TwoStep):
    """``TwoStep`` with one continuous action that changes nothing: Q(s0, a) = 0.5 + gamma, Q(s1, a) = 1."""

    continuous = True


class ContinuousTruncated(Truncated):
    """``Truncated`` with one continuous action that changes nothing: Q(s, a) = 1 / (1 - gamma)."""

    continuous = True


class ContinuousBandit(_Probe):
    """One step, one continuous action ``a`` in [-2, 2], reward ``-(a - 1)^2``, terminates: Q(s, a) = -(a - 1)^2,
    best action 1 (in the env's own units: an agent acting in [-1, 1] must send 0.5)."""

    continuous = True

    def _reward(self, obs, action):
        return -jnp.square(jnp.reshape(action, (-1,))[0] - 1.0).astype(jnp.float32)


@struct.dataclass
class MemoryState(environment.EnvState):
    cue: jax.Array  # +1 or -1, shown only on the first step


class Memory(environment.Environment):
    """Partially observable: remember a cue for 2 steps.

    obs = ``[cue, 0]`` on step 1 (cue = +1 or -1), ``[0, 0]`` on step 2, ``[0, 1]`` on step 3 (decide). On step 3,
    action 1 pays 1 if the cue was +1, action 0 pays 1 if it was -1; the episode then terminates. Earlier actions
    pay nothing. A memoryless policy earns 0.5 per episode on average; a recurrent one can earn 1.
    """

    @property
    def default_params(self) -> ProbeParams:
        return ProbeParams(max_steps_in_episode=10)

    def _obs(self, state: MemoryState) -> jax.Array:
        first = state.time == 0
        decide = state.time == 2
        return jnp.stack([jnp.where(first, state.cue, 0.0), jnp.where(decide, 1.0, 0.0)]).astype(jnp.float32)

    def reset_env(self, key, params):
        state = MemoryState(time=0, cue=jnp.where(jax.random.bernoulli(key), 1.0, -1.0))
        return self._obs(state), state

    def step_env(self, key, state, action, params):
        decide = state.time == 2
        correct = action == (state.cue > 0).astype(action.dtype)
        reward = jnp.where(decide & correct, 1.0, 0.0).astype(jnp.float32)
        new_state = MemoryState(time=state.time + 1, cue=state.cue)
        return self._obs(new_state), new_state, reward, decide, {}

    def is_terminated(self, state, params):
        return state.time >= 3

    @property
    def name(self) -> str:
        return "Memory"

    @property
    def num_actions(self) -> int:
        return 2

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)

