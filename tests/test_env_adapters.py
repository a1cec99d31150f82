"""envs.make on users' own environments: instances, register, module:factory, five-value step, dict observations."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

import envs
from envs import adapters, registry, wrappers

ROOT = Path(__file__).resolve().parents[1]


# --- a gymnax 1.0 env (six-value step): walk right to the goal ---------------------------------------------------


@struct.dataclass
class CorridorState(environment.EnvState):
    pos: jax.Array


@struct.dataclass
class CorridorParams(environment.EnvParams):
    max_steps_in_episode: int = 10
    goal: int = 3


class Corridor(environment.Environment):
    """obs ``[pos]``; action 1 steps right (reward 1), 0 stays; terminates at ``goal``; gymnax truncates the rest."""

    @property
    def default_params(self):
        return CorridorParams()

    def reset_env(self, key, params):
        return jnp.zeros((1,), jnp.float32), CorridorState(time=0, pos=jnp.int32(0))

    def step_env(self, key, state, action, params):
        state = CorridorState(time=state.time + 1, pos=state.pos + action)
        return state.pos.astype(jnp.float32)[None], state, action.astype(jnp.float32), state.pos >= params.goal, {}

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 100.0, (1,), jnp.float32)


# --- gymnax 0.0.x-style envs (five-value step, auto-reset inside step) -------------------------------------------


class OldStyleEnvironment:
    """The gymnax 0.0.x base class in brief: ``step`` = ``step_env`` + auto-reset, returning five values."""

    def step(self, key, state, action, params=None):
        params = self.default_params if params is None else params
        key_step, key_reset = jax.random.split(key)
        obs_st, state_st, reward, done, info = self.step_env(key_step, state, action, params)
        obs_re, state_re = self.reset_env(key_reset, params)
        state = jax.tree.map(lambda re, st: jax.lax.select(done, re, st), state_re, state_st)
        obs = jax.lax.select(done, obs_re, obs_st)
        return obs, state, reward, done, info

    def reset(self, key, params=None):
        return self.reset_env(key, self.default_params if params is None else params)

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(0.0, 100.0, (2,), jnp.float32)


@struct.dataclass
class OldState:
    pos: jax.Array
    time: jax.Array


@struct.dataclass
class OldParams:
    max_steps_in_episode: int = 5
    goal: int = 3


class OldCorridor(OldStyleEnvironment):
    """obs ``[pos, time]``; action 1 steps right; ``done`` = goal reached or ``time >= max_steps_in_episode``."""

    @property
    def default_params(self):
        return OldParams()

    def reset_env(self, key, params):
        state = OldState(pos=jnp.int32(0), time=jnp.int32(0))
        return self._obs(state), state

    def _obs(self, state):
        return jnp.stack([state.pos, state.time]).astype(jnp.float32)

    def step_env(self, key, state, action, params):
        state = OldState(pos=state.pos + action, time=state.time + 1)
        return self._obs(state), state, jnp.float32(1.0), self.is_terminal(state, params), {}

    def is_terminal(self, state, params):
        return (state.pos >= params.goal) | (state.time >= params.max_steps_in_episode)


@struct.dataclass
class HiddenClockState:
    pos: jax.Array
    t: jax.Array  # not a field name the adapter knows


@struct.dataclass
class HiddenClockParams:
    limit: int = 5
    goal: int = 3


class HiddenClockCorridor(OldCorridor):
    """OldCorridor whose clock has names the adapter does not know: nothing tells a time limit from the goal."""

    @property
    def default_params(self):
        return HiddenClockParams()

    def reset_env(self, key, params):
        state = HiddenClockState(pos=jnp.int32(0), t=jnp.int32(0))
        return self._obs(state), state

    def _obs(self, state):
        return jnp.stack([state.pos, state.t]).astype(jnp.float32)

    def step_env(self, key, state, action, params):
        state = HiddenClockState(pos=state.pos + action, t=state.t + 1)
        done = (state.pos >= params.goal) | (state.t >= params.limit)
        return self._obs(state), state, jnp.float32(1.0), done, self._info(state, params)

    def _info(self, state, params):
        return {}


class InfoTruncationCorridor(HiddenClockCorridor):
    """HiddenClockCorridor that reports its time limit in ``info["truncation"]`` (brax style: a float, and 0 where
    the episode also ended on its own)."""

    def _info(self, state, params):
        return {"truncation": ((state.t >= params.limit) & (state.pos < params.goal)).astype(jnp.float32)}


class StepOnlyEnv(OldCorridor):
    """A five-value env without step_env: its pre-reset observation cannot be recovered."""

    step_env = None

    def step(self, key, state, action, params=None):
        return OldCorridor.step_env(self, key, state, action, self.default_params if params is None else params)


# --- dict observations -------------------------------------------------------------------------------------------


class DictObsEnv(Corridor):
    """Corridor observed as ``{"pos": [pos, 2 pos] in Box(0, 100), "flag": pos % 3 in Discrete(3)}``."""

    def _dict_obs(self, pos):
        return {"pos": jnp.stack([pos, 2 * pos]).astype(jnp.float32), "flag": pos % 3}

    def reset_env(self, key, params):
        obs, state = super().reset_env(key, params)
        return self._dict_obs(state.pos), state

    def step_env(self, key, state, action, params):
        _, state, reward, terminated, info = super().step_env(key, state, action, params)
        return self._dict_obs(state.pos), state, reward, terminated, info

    def observation_space(self, params):
        return spaces.Dict({"pos": spaces.Box(0.0, 100.0, (2,), jnp.float32), "flag": spaces.Discrete(3)})


# --- helpers -----------------------------------------------------------------------------------------------------


def _play(env, params, actions):
    """Step one env through ``actions`` from reset; returns the per-step outputs as numpy."""
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    steps = []
    for t, action in enumerate(actions):
        obs, state, reward, terminated, truncated, info = env.step(jax.random.PRNGKey(t + 1), state, action, params)
        steps.append({"obs": np.asarray(obs), "terminated": bool(terminated), "truncated": bool(truncated),
                      "final": np.asarray(info["final_observation"])})
    return steps


def _done_flags(steps):
    return [(s["terminated"], s["truncated"]) for s in steps]


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made in a test are dropped afterwards."""
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))


# --- tests -------------------------------------------------------------------------------------------------------


def test_import_starts_no_jax_backend():
    code = ("import envs, envs.wrappers, envs.registry, envs.probes, envs.adapters\n"
            "from jax._src import xla_bridge as xb\n"
            "import sys\n"
            "assert not xb._backends, 'a JAX backend started'\n"
            "assert 'gymnax' not in sys.modules, 'gymnax imported'\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr


def test_make_instance_uses_default_or_given_params():
    env, params = envs.make(Corridor())
    assert params == CorridorParams()
    assert isinstance(env, envs.EpisodeStatistics) and isinstance(env.unwrapped, Corridor)
    # Goal 3 reached on the third right step: terminated.
    assert _done_flags(_play(env, params, [1, 1, 1]))[-1] == (True, False)
    short = CorridorParams(max_steps_in_episode=2)
    env, params = envs.make(Corridor(), env_params=short)
    assert params is short
    assert _done_flags(_play(env, params, [0, 0])) == [(False, False), (False, True)]  # time limit: truncated


def test_make_instance_rejects_env_kwargs():
    with pytest.raises(ValueError, match="env_kwargs"):
        envs.make(Corridor(), goal=4)


def test_five_value_env_splits_done_by_the_clock():
    env, params = envs.make(OldCorridor())
    assert isinstance(env._env._env, envs.FiveToSixStep)  # EpisodeStatistics(FlattenObservation(FiveToSixStep))
    # Standing still 5 steps: the time limit. obs is [pos, time].
    steps = _play(env, params, [0, 0, 0, 0, 0, 0])
    assert _done_flags(steps)[4] == (False, True)
    np.testing.assert_array_equal(steps[4]["final"], [0.0, 5.0])  # the observation before the reset
    np.testing.assert_array_equal(steps[4]["obs"], [0.0, 0.0])  # the reset observation
    np.testing.assert_array_equal(steps[5]["obs"], [0.0, 1.0])  # the next episode goes on
    # Three right steps: the goal, terminated.
    steps = _play(env, params, [1, 1, 1])
    assert _done_flags(steps) == [(False, False), (False, False), (True, False)]
    np.testing.assert_array_equal(steps[2]["final"], [3.0, 3.0])
    np.testing.assert_array_equal(steps[2]["obs"], [0.0, 0.0])
    # The goal reached on the last allowed step: terminal on its own, so terminated.
    assert _done_flags(_play(env, params, [0, 0, 1, 1, 1]))[-1] == (True, False)


def test_five_value_env_without_a_known_clock_terminates():
    env, params = envs.make(HiddenClockCorridor())
    assert _done_flags(_play(env, params, [0] * 5))[-1] == (True, False)


def test_five_value_env_reads_truncation_from_info():
    env, params = envs.make(InfoTruncationCorridor())
    assert _done_flags(_play(env, params, [0] * 5))[-1] == (False, True)
    assert _done_flags(_play(env, params, [1, 1, 1]))[-1] == (True, False)


def test_five_value_env_needs_step_env():
    with pytest.raises(ValueError, match="step_env"):
        envs.make(StepOnlyEnv())


@pytest.mark.parametrize("make_env", [OldCorridor, InfoTruncationCorridor, Corridor])
def test_adapted_envs_auto_reset_under_vmap_and_scan(make_env):
    env, params = envs.make(make_env())
    num_envs, num_steps = 8, 300
    keys = jax.random.split(jax.random.PRNGKey(0), num_envs)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)

    def one_step(carry, key):
        obs, state = carry
        key_action, key_step = jax.random.split(key)
        action = jax.random.bernoulli(key_action, 0.3, (num_envs,)).astype(jnp.int32)
        out = jax.vmap(env.step, in_axes=(0, 0, 0, None))(jax.random.split(key_step, num_envs), state, action, params)
        obs, state, _, terminated, truncated, info = out
        return (obs, state), (obs, terminated, truncated, info["final_observation"], info["episode_length"])

    step_keys = jax.random.split(jax.random.PRNGKey(1), num_steps)
    _, (obs, terminated, truncated, final, length) = jax.jit(lambda k: jax.lax.scan(one_step, (obs, state), k))(
        step_keys)
    obs, terminated, truncated, final, length = map(np.asarray, (obs, terminated, truncated, final, length))
    done = terminated | truncated
    if make_env is not Corridor:  # gymnax 1.0 itself flags both when the goal is reached on the last allowed step
        assert not (terminated & truncated).any()
    assert terminated.any() and truncated.any()
    np.testing.assert_array_equal(obs[done], 0.0)  # every episode restarts at the reset observation
    np.testing.assert_array_equal(final[~done], obs[~done])  # final_observation is obs where nothing ended
    np.testing.assert_array_equal(final[done][:, 0] >= 3, terminated[done])  # goal position <=> terminated
    limit = params.limit if isinstance(params, HiddenClockParams) else params.max_steps_in_episode
    assert length[done].max() == limit  # some episodes run to the time limit, none beyond


def test_dict_observations_are_flattened_in_sorted_key_order():
    env, params = envs.make(DictObsEnv())
    space = env.observation_space(params)
    assert space.shape == (5,)  # flag: one-hot of 3, then pos: 2
    np.testing.assert_array_equal(space.low, [0, 0, 0, 0, 0])
    np.testing.assert_array_equal(space.high, [1, 1, 1, 100, 100])
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    np.testing.assert_array_equal(obs, [1, 0, 0, 0, 0])  # pos 0: flag 0
    obs, state, _, _, _, info = env.step(jax.random.PRNGKey(1), state, 1, params)
    np.testing.assert_array_equal(obs, [0, 1, 0, 1, 2])  # pos 1: flag 1, [1, 2]
    assert obs.dtype == jnp.float32 and info["final_observation"].shape == (5,)


def test_tuple_observation_space_is_flattened():
    space = spaces.Tuple([spaces.Discrete(2), spaces.Box(-1.0, 1.0, (2, 2), jnp.float32)])
    from envs.wrappers import flat_bounds, flatten_obs

    low, high = flat_bounds(space)
    np.testing.assert_array_equal(low, [0, 0, -1, -1, -1, -1])
    np.testing.assert_array_equal(high, [1, 1, 1, 1, 1, 1])
    obs = (jnp.int32(1), jnp.array([[0.5, -0.5], [0.25, 0.0]]))
    np.testing.assert_array_equal(flatten_obs(obs, space), [0, 1, 0.5, -0.5, 0.25, 0.0])


def test_register_adds_an_id(scratch_registry):
    envs.register("Test-Corridor-v0", lambda goal=3: (Corridor(), CorridorParams(goal=goal)))
    assert "Test-Corridor-v0" in envs.env_ids()
    env, params = envs.make("Test-Corridor-v0", goal=1)
    assert params.goal == 1
    assert _done_flags(_play(env, params, [1]))[-1] == (True, False)
    envs.register("Test-Old-v0", OldCorridor)  # a class is a factory
    assert isinstance(envs.make("Test-Old-v0")[0]._env._env, envs.FiveToSixStep)


def test_register_refuses_an_existing_id_unless_overwrite(scratch_registry):
    envs.register("Test-Corridor-v0", Corridor)
    with pytest.raises(ValueError, match="'Test-Corridor-v0'.*overwrite=True"):
        envs.register("Test-Corridor-v0", Corridor)
    with pytest.raises(ValueError, match="'CartPole-v1'"):
        envs.register("CartPole-v1", Corridor)
    envs.register("Test-Corridor-v0", DictObsEnv, overwrite=True)
    assert isinstance(envs.make("Test-Corridor-v0")[0].unwrapped, DictObsEnv)


def test_module_factory_string():
    env, params = envs.make("tests.custom_envs:make_short_cartpole", max_steps=7)
    assert params.max_steps_in_episode == 7 and env.observation_space(params).shape == (4,)
    env, params = envs.make("gymnax.environments.classic_control.cartpole:CartPole")  # a class
    assert params.max_steps_in_episode == 500


@pytest.mark.parametrize("spec, named", [
    ("no_such_module_xyz:make", "'no_such_module_xyz'"),
    ("tests.custom_envs:no_such_factory", "'no_such_factory'"),
    ("tests.custom_envs:", "'tests.custom_envs:'"),
])
def test_bad_module_factory_string_is_one_clear_error(spec, named):
    with pytest.raises(ValueError) as err:
        envs.make(spec)
    message = str(err.value)
    assert named in message and "package.module:attribute" in message and "\n" not in message


def test_probes_stay_lazy_and_complete():
    assert set(envs.PROBES) <= set(envs.env_ids())
    assert envs.PROBES["Probe-OneStep-v0"]().name == "OneStep"


# --- the reset computed only when an episode ended (envs.adapters.reset_when_done) ---------------------------------

RESETS = []


class CountingCorridor(Corridor):
    """The corridor, counting the resets it computes (a host callback runs only where its branch runs)."""

    def reset_env(self, key, params):
        jax.debug.callback(lambda: RESETS.append(1))
        return super().reset_env(key, params)


class OwnStepCorridor(Corridor):
    def step(self, key, state, action, params=None):
        return super().step(key, state, action, params)


def test_reset_when_done_computes_a_reset_only_at_the_steps_that_end_an_episode():
    env, params = envs.make(CountingCorridor())
    one = adapters.reset_when_done(env)
    assert type(one) is type(env) and one is not env and type(one._env._env) is adapters.ResetWhenDone
    assert env._env._env.__class__ is CountingCorridor  # the env it was made from is left as it was
    gymnax_step = jax.jit(lambda k, s, a: env.step(k, s, a, params))
    own_step = jax.jit(lambda k, s, a: one.step(k, s, a, params))
    _, state = env.reset(jax.random.PRNGKey(0), params)
    # right, right, right (the goal: terminated), then 10 steps standing still (truncated by the time limit)
    actions = [1, 1, 1] + [0] * 10
    counts, ended = {"gymnax": 0, "own": 0}, []
    for i, action in enumerate(actions):
        key, action = jax.random.PRNGKey(i), jnp.int32(action)
        for name, step in (("gymnax", gymnax_step), ("own", own_step)):
            RESETS.clear()
            out = jax.block_until_ready(step(key, state, action))
            jax.effects_barrier()
            counts[name] += len(RESETS)
            if name == "gymnax":
                expected = out
        jax.tree.map(np.testing.assert_array_equal, out, expected)  # the same values, info included
        state = out[1]
        if out[3] or out[4]:
            ended.append(i)
    assert ended == [2, 12]  # the goal at the third step, the time limit ten steps after
    assert counts == {"gymnax": len(actions), "own": len(ended)}


def test_reset_when_done_is_none_for_envs_with_a_step_of_their_own():
    assert adapters.reset_when_done(envs.make(OwnStepCorridor())[0]) is None  # a user's override
    assert adapters.reset_when_done(envs.make(OldCorridor())[0]) is None  # the five-value adapter resets itself

    class Unknown(wrappers.Wrapper):
        pass

    env, _ = envs.make("CartPole-v1")
    assert adapters.reset_when_done(Unknown(env)) is None  # a wrapper that may step its own way
    assert adapters.reset_when_done(env) is not None
