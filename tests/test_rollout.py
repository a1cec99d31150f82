import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment, spaces

import envs
from envs.probes import ProbeParams
from rlpar.core import platform, rollout
from tests.helpers import jaxpr_eqns

SCHEDULES = pytest.mark.parametrize("up_front", [True, False], ids=["keys-up-front", "keys-per-step"])


@pytest.fixture(autouse=True)
def _schedule(request):
    """Tests parametrized by ``up_front`` trace their collectors under that key schedule (the platform's otherwise)."""
    up_front = request.node.callspec.params.get("up_front") if hasattr(request.node, "callspec") else None
    rollout.set_keys_up_front(up_front)
    yield
    rollout.set_keys_up_front(None)


def _constant_policy(value_of_obs):
    """An ``act_fn`` taking action 0, with ``{"value": value_of_obs(obs)}`` as its extras."""

    def act_fn(agent_state, carry, obs, key):
        return jnp.zeros(obs.shape[0], jnp.int32), carry, {"value": value_of_obs(obs)}

    return act_fn


def _bootstrap(value_of_obs):
    return lambda agent_state, carry, obs: value_of_obs(obs)


def test_collector_shapes_and_truncation_bootstrap_value():
    # Probe-Truncated-v0 is cut every 5 steps; a value function "100 + obs" lets us see which obs was evaluated.
    env, params = envs.make("Probe-Truncated-v0")
    collect = rollout.make_collector(env, params, _constant_policy(lambda o: o[:, 0]), 12,
                                     bootstrap=_bootstrap(lambda obs: 100.0 + obs[:, 0]))
    state = rollout.reset(env, params, jax.random.PRNGKey(0), num_envs=3)
    state, traj = jax.jit(collect)(None, state)
    assert traj.obs.shape == (12, 3, 1) and traj.reward.shape == (12, 3)
    truncated = np.asarray(traj.truncated)
    # steps 5 and 10 of each env (indices 4, 9) are truncations; nothing terminates
    np.testing.assert_array_equal(truncated, np.isin(np.arange(12), [4, 9])[:, None].repeat(3, 1))
    assert not np.asarray(traj.terminated).any()
    np.testing.assert_allclose(np.asarray(traj.final), np.where(truncated, 100.0, 0.0))
    assert traj.extras["value"].shape == (12, 3)
    np.testing.assert_array_equal(np.asarray(traj.episode_done), truncated)
    assert state.obs.shape == (3, 1)


def test_collector_terminations_have_no_bootstrap_value():
    env, params = envs.make("Probe-OneStep-v0")
    collect = rollout.make_collector(env, params, _constant_policy(lambda o: o[:, 0]), 4,
                                     bootstrap=_bootstrap(lambda o: 1.0 + o[:, 0]))
    _, traj = collect(None, rollout.reset(env, params, jax.random.PRNGKey(0), 2))
    assert np.asarray(traj.terminated).all() and not np.asarray(traj.truncated).any()
    np.testing.assert_array_equal(np.asarray(traj.final), 0.0)


@SCHEDULES
def test_collector_is_deterministic_and_envs_differ(up_front):
    env, params = envs.make("CartPole-v1")
    act_fn = lambda p, carry, obs, key: (jax.random.randint(key, obs.shape[:1], 0, 2), carry, ())
    collect = jax.jit(rollout.make_collector(env, params, act_fn, 50))  # a random policy: no extras, no bootstrap
    s0 = rollout.reset(env, params, jax.random.PRNGKey(3), 4)
    _, a = collect(None, s0)
    _, b = collect(None, s0)
    np.testing.assert_array_equal(a.obs, b.obs)
    assert not np.allclose(a.obs[:, 0], a.obs[:, 1])  # independent envs
    assert a.extras == () and a.final == ()


def test_agent_carry_flows_and_resets_where_episodes_end():
    # The carry counts the steps this policy has acted in the current episode; the collector must put it back to
    # initial_carry (zeros) where an episode ends, so at every step it equals episode_length - 1. The bootstrap sees
    # the carry after the truncated step, before the reset: the episode's full length.
    env, params = envs.make("CartPole-v1")
    params = params.replace(max_steps_in_episode=12)

    def act_fn(agent_state, carry, obs, key):
        return jax.random.randint(key, obs.shape[:1], 0, 2), carry + 1, {"seen": carry}

    bootstrap = lambda agent_state, carry, obs: carry.astype(jnp.float32)
    collect = jax.jit(rollout.make_collector(env, params, act_fn, 60, bootstrap=bootstrap,
                                             initial_carry=lambda n: jnp.zeros(n, jnp.int32)))
    state = rollout.reset(env, params, jax.random.PRNGKey(5), 16, jnp.zeros(16, jnp.int32))
    state, traj = collect(None, state)
    length = np.asarray(traj.episode_length)
    np.testing.assert_array_equal(np.asarray(traj.extras["seen"]), length - 1)
    truncated = np.asarray(traj.truncated)
    assert truncated.any() and np.asarray(traj.terminated).any()
    np.testing.assert_array_equal(np.asarray(traj.final), np.where(truncated, 12.0, 0.0))
    done = np.asarray(traj.episode_done)[-1]
    np.testing.assert_array_equal(np.asarray(state.carry), np.where(done, 0, length[-1]))


def _step_keys(key, num_steps, num_envs, up_front):
    """The collector's keys, written out from its docstring: ``[T]`` acting keys and ``[T, B]`` env keys."""
    _, key_steps = jax.random.split(key)
    if up_front:
        keys = jax.random.split(key_steps, num_steps * (1 + num_envs)).reshape((num_steps, 1 + num_envs, -1))
        return keys[:, 0], keys[:, 1:]
    acting, env = jax.vmap(lambda t: jax.random.split(jax.random.fold_in(key_steps, t)))(jnp.arange(num_steps)).swapaxes(0, 1)
    return acting, jax.vmap(lambda k: jax.random.split(k, num_envs))(env)


def _reference_final_values(env, params, act_fn, value_fn, state, num_steps):
    """Step the same envs with the same keys, keep every step's final observation, value the truncated ones."""
    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    keys = _step_keys(state.key, num_steps, state.obs.shape[0], rollout.keys_up_front(num_steps))

    def step(carry, keys_t):
        env_state, obs = carry
        action, _, _ = act_fn(None, (), obs, keys_t[0])
        obs, env_state, _, terminated, truncated, info = step_envs(keys_t[1], env_state, action, params)
        truncated = truncated & ~terminated
        return (env_state, obs), (truncated, info["final_observation"])

    _, (truncated, final_obs) = jax.lax.scan(step, (state.env_state, state.obs), keys)
    values = value_fn(final_obs.reshape((-1,) + final_obs.shape[2:])).reshape(truncated.shape)
    return np.asarray(truncated), np.where(truncated, np.asarray(values), 0.0)


@struct.dataclass
class _ClockState(environment.EnvState):
    x: jax.Array


class _Clock(environment.Environment):
    """Observation ``[x]``, with ``x`` random at reset and +1 per step, so every final observation differs. Episodes
    terminate with probability 0.05 per step, so environments fall out of step and reach the time limit at different
    steps (a termination on the step the time limit also ends counts as a termination, not a truncation)."""

    @property
    def default_params(self):
        return ProbeParams(max_steps_in_episode=4)

    def reset_env(self, key, params):
        state = _ClockState(time=0, x=jax.random.uniform(key, (), minval=0.0, maxval=100.0))
        return state.x[None], state

    def step_env(self, key, state, action, params):
        state = _ClockState(time=state.time + 1, x=state.x + 1.0)
        return state.x[None], state, jnp.float32(1.0), jax.random.bernoulli(key, 0.05), {}

    def is_terminated(self, state, params):
        return jnp.bool_(False)

    def action_space(self, params=None):
        return spaces.Discrete(1)

    def observation_space(self, params):
        return spaces.Box(0.0, 1000.0, (1,), jnp.float32)


@SCHEDULES
@pytest.mark.parametrize("time_limit, num_steps", [(20, 30), (4, 30)])
def test_final_values_belong_to_their_truncated_steps(time_limit, num_steps, up_front):
    # With the 20-step limit each env is truncated at most once per collect (one batched valuation after the scan);
    # with the 4-step limit several times (the spilled path). value_fn(x) = 7 + 3 x tells the observations apart.
    env = envs.EpisodeStatistics(_Clock())
    params = env.default_params.replace(max_steps_in_episode=time_limit)
    act_fn = _constant_policy(lambda obs: jnp.zeros(obs.shape[0]))
    value_fn = lambda obs: 7.0 + 3.0 * obs[:, 0]
    collect = jax.jit(rollout.make_collector(env, params, act_fn, num_steps, bootstrap=_bootstrap(value_fn)))
    state = rollout.reset(env, params, jax.random.PRNGKey(4), 16)
    truncated, expected = _reference_final_values(env, params, act_fn, value_fn, state, num_steps)
    _, traj = collect(None, state)
    np.testing.assert_array_equal(np.asarray(traj.truncated), truncated)
    counts = truncated.sum(axis=0)
    steps = set(np.nonzero(truncated)[0])
    assert len(steps) >= 2  # the envs are truncated at different steps
    assert (np.asarray(traj.terminated) & ~truncated).any()
    if 2 * time_limit > num_steps:  # no env can reach the limit twice
        assert counts.max() == 1 and counts.sum() >= 8
    else:
        assert counts.max() >= 3 and num_steps - 1 in steps  # several per env, and at the last step too
    np.testing.assert_allclose(np.asarray(traj.final), expected, rtol=1e-6)


class _Noise(environment.Environment):
    """Observation: a uniform draw from the step's key, so each (step, env) shows the key it was given."""

    @property
    def default_params(self):
        return ProbeParams(max_steps_in_episode=1000)

    def reset_env(self, key, params):
        return jax.random.uniform(key, (1,)), environment.EnvState(time=0)

    def step_env(self, key, state, action, params):
        return jax.random.uniform(key, (1,)), state.replace(time=state.time + 1), jnp.float32(0.0), jnp.bool_(False), {}

    def action_space(self, params=None):
        return spaces.Discrete(1)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)


@SCHEDULES
def test_every_step_and_env_gets_its_own_keys(up_front):
    """Both key schedules give every (step, env) a key of its own, the acting key of each step differs from all of
    them, and the keys are the ones the schedule's description gives (``_step_keys``)."""
    noise = _Noise()
    env, params = envs.EpisodeStatistics(noise), noise.default_params
    steps, num_envs = 9, 5
    act_fn = lambda p, carry, obs, key: (jnp.zeros(obs.shape[:1], jnp.int32), carry,
                                         {"draw": jnp.broadcast_to(jax.random.uniform(key), obs.shape[:1])})
    state = rollout.reset(env, params, jax.random.PRNGKey(6), num_envs)
    _, traj = jax.jit(rollout.make_collector(env, params, act_fn, steps))(None, state)
    obs, acting = np.asarray(traj.obs[..., 0]), np.asarray(traj.extras["draw"][:, 0])
    assert len(np.unique(obs)) == steps * num_envs and len(np.unique(acting)) == steps
    assert not np.isin(acting, obs).any()
    key_act, key_env = _step_keys(state.key, steps, num_envs, up_front)
    any_state = noise.reset(jax.random.PRNGKey(0), params)[1]
    expected = jax.vmap(jax.vmap(lambda k: noise.step(k, any_state, 0, params)[0][0]))(key_env)
    np.testing.assert_array_equal(obs[1:], np.asarray(expected)[:-1])  # traj.obs[t]: what step t acted on
    np.testing.assert_array_equal(acting, np.asarray(jax.vmap(jax.random.uniform)(key_act)))


def test_the_platform_picks_the_key_schedule():
    """XLA:CPU splits every key up front (its threefry is a loop per call); off it, only up to KEYS_UP_FRONT_MAX."""
    assert rollout.keys_up_front(10 ** 9)
    rollout.set_keys_up_front(False)
    assert not rollout.keys_up_front(10)


def _conds(jaxpr) -> int:
    return sum(eqn.primitive.name == "cond" for eqn in jaxpr_eqns(jaxpr))


@pytest.mark.parametrize("env_id", ["Breakout-MinAtar", "Probe-OneStep-v0"])
def test_one_env_stepped_unbatched_collects_what_the_vmapped_step_does(env_id):
    # platform.one_env_step: a collect of one env steps it unbatched, its reset under a cond taken only where the
    # episode ended. Both envs' dynamics are integer arithmetic (the probe's episode ends at every step), so the
    # values are the vmapped step's bit for bit; a float env's are only up to rounding (XLA fuses the step
    # differently around a cond).
    env, params = envs.make(env_id)
    actions = env.action_space(params).n
    act_fn = lambda p, carry, obs, key: (jax.random.randint(key, obs.shape[:1], 0, actions), carry, ())  # noqa: E731
    runs, conds = {}, {}
    for on in (False, True):
        with platform.forcing(one_env_step=on):
            for num_envs in (1, 2):
                collect = rollout.make_collector(env, params, act_fn, 300)
                state = rollout.reset(env, params, jax.random.PRNGKey(1), num_envs)
                conds[on, num_envs] = _conds(jax.make_jaxpr(collect)(None, state).jaxpr)
                runs[on, num_envs] = jax.jit(collect)(None, state)
    assert int(np.asarray(runs[True, 1][1].episode_done).sum()) >= 3  # episodes ended, and the envs reset
    for num_envs in (1, 2):
        jax.tree.map(np.testing.assert_array_equal, runs[True, num_envs], runs[False, num_envs])
    assert conds[True, 1] == conds[False, 1] + 1  # the reset's cond
    assert conds[True, 2] == conds[False, 2]  # two envs: vmapped as ever


@pytest.mark.slow
@pytest.mark.parametrize("num_seeds", [1, 2])
def test_one_env_per_slot_trains_as_the_vmapped_step_does_over_seeds_and_devices(num_seeds):
    # The runner's path: 2 devices x 1 or 2 seeds, one env per device and seed (num_envs counts every device's): one
    # seed takes the reset's cond inside the device mapping (the TPU's default path at one env); under the slots'
    # vmap of two seeds the cond becomes reset_where_done's loop over the slots whose episode ended. The
    # episodes (Breakout-MinAtar's integer dynamics) are the same bit for bit; the parameters only up to rounding,
    # as XLA fuses the update of a program with a different collect differently (a few 1e-11 apart here).
    import agents
    from agents.ppo import PPOConfig
    from rlpar.run.runner import RunConfig, run

    config = PPOConfig.for_env("Breakout-MinAtar", platform="cpu").replace(
        num_envs=2, num_steps=64, total_timesteps=2 * 64 * 3, num_minibatches=2, update_epochs=1,
        hidden_sizes=(16, 16))
    results = {}
    for on in (False, True):
        with platform.forcing(one_env_step=on):
            results[on] = run(agents.ppo.SPEC, config,
                              RunConfig(devices=2, num_seeds=num_seeds, log_every=3, eval_every=0))
    strip = lambda records: [{k: v for k, v in r.items() if k not in ("time_s", "sps", "startup_s")}  # noqa: E731
                             for r in records]

    def same(a, b):  # integers, booleans and keys (the environments' states, the episodes' counts) bit for bit
        if np.issubdtype(np.asarray(a).dtype, np.floating):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
        else:
            np.testing.assert_array_equal(a, b)

    # the records: episodes and counts exactly; the losses up to the same rounding as the parameters (the two
    # programs fuse differently, so their losses may differ in the last bits)
    got, want = strip(results[True].metrics), strip(results[False].metrics)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    jax.tree.map(same, got, want)
    assert [r.get("episode_return") for r in got] == [r.get("episode_return") for r in want]

    jax.tree.map(same, jax.device_get(results[True].state), jax.device_get(results[False].state))
    assert any("episode_return" in r for r in results[True].metrics)  # episodes ended: the resets ran
