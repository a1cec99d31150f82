"""Environment suites beyond gymnax (``envs.suites``): Craftax and brax through the engine on 2 fake devices, the
terminated / truncated split on crafted episodes, Craftax's achievements as episode metrics, the sparse auto-reset,
and the one-line error when an extra is missing. A test that needs a suite is skipped, naming the pip command, when
its extra is not installed. Compiled programs are shared through module fixtures (Craftax compiles slowly on CPU).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import agents
import envs
import envs.brax_suite
from agents.ppo import PPOConfig
from envs import registry
from envs.adapters import FiveToSixStep, reset_where_done
from rlpar.tools import gif, policy
from rlpar.tools import train as train_cli

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(num_envs=4, num_steps=8, num_minibatches=2, update_epochs=1, hidden_sizes=(16,), total_timesteps=64)
LIMIT = 6  # the time limit of the crafted episodes


# Compiling Craftax/brax steps and launching processes take minutes on 2 cores: run by `-m slow` (CI runs it).
pytestmark = pytest.mark.slow


def _needs(extra: str):
    if extra == "brax":  # MuJoCo picks its OpenGL platform when first imported (see envs.brax_suite)
        envs.brax_suite.default_mujoco_gl()
    return pytest.importorskip(extra, reason=f'the {extra} extra is not installed: pip install -e ".[{extra}]"')


def _split(terminated, truncated):
    return list(zip(np.asarray(terminated).tolist(), np.asarray(truncated).tolist()))


def _replicated(tree) -> bool:
    """Every leaf ``[D, ...]`` holds the same values on every device."""
    return all(np.array_equal(leaf[0], leaf[d]) for leaf in jax.tree.leaves(tree) for d in range(1, len(leaf)))


# --- without the extras ------------------------------------------------------------------------------------------


def test_importing_the_adapters_imports_no_suite_and_starts_no_jax_backend():
    code = ("import envs, envs.suites, envs.craftax_suite, envs.brax_suite, agents, rlpar.evaluate\n"
            "from jax._src import xla_bridge as xb\n"
            "import sys\n"
            "assert not xb._backends, 'a JAX backend started'\n"
            "loaded = [m for m in ('craftax', 'brax', 'mujoco', 'gymnax') if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("env_id, extra", [("Craftax-Classic-Symbolic-v1", "craftax"),
                                           ("Craftax-Symbolic-v1", "craftax"), ("brax-ant", "brax"),
                                           ("brax-inverted_pendulum@spring", "brax")])
def test_a_missing_extra_is_one_line_naming_the_pip_command(env_id, extra, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, extra, None)  # ``import extra`` now fails as if it were not installed
    with pytest.raises(ValueError) as err:
        envs.make(env_id)
    assert f"env {env_id!r} needs the {extra} extra: pip install -e \".[{extra}]\"" in str(err.value)
    assert "\n" not in str(err.value)
    assert train_cli.main(["ppo", "--env", env_id, "--devices", "2"]) == 2  # the CLI: exit code 2, one line
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith("error: env") and f".[{extra}]" in err_lines[0]


def test_an_unknown_id_suggests_the_suites():
    with pytest.raises(ValueError, match="Did you mean 'Craftax-Classic-Symbolic-v1'.*suites: .*brax-NAME"):
        envs.make("Craftax-Clasic-Symbolic-v1")


# --- the sparse auto-reset (envs.adapters.reset_where_done), on a cheap five-value env ---------------------------


@struct.dataclass
class WalkState:
    pos: jax.Array
    time: jax.Array
    stamp: jax.Array  # drawn from the reset key: tells which reset made the state


@struct.dataclass
class WalkParams:
    max_steps_in_episode: int = 4
    goal: int = 3


class Walk:
    """gymnax 0.0.x-style: obs ``[pos, time, stamp]``; action 1 steps right; the goal terminates, the clock
    truncates; the reset draws ``stamp`` from its key. Reports whether the goal was reached as an episode metric."""

    default_params = WalkParams()

    def reset_env(self, key, params):
        state = WalkState(pos=jnp.int32(0), time=jnp.int32(0), stamp=jax.random.uniform(key))
        return self._obs(state), state

    def _obs(self, state):
        return jnp.stack([state.pos, state.time, state.stamp]).astype(jnp.float32)

    def step_env(self, key, state, action, params):
        state = state.replace(pos=state.pos + action, time=state.time + 1)
        info = {"episode_metrics": {"walk/reached_goal": (state.pos >= params.goal).astype(jnp.float32)}}
        return self._obs(state), state, jnp.float32(1.0), self.is_terminal(state, params), info

    def is_terminal(self, state, params):
        return (state.pos >= params.goal) | (state.time >= params.max_steps_in_episode)

    def reset(self, key, params=None):
        return self.reset_env(key, params or self.default_params)

    def step(self, key, state, action, params=None):  # five values, as gymnax 0.0.x
        return self.step_env(key, state, action, params or self.default_params)

    def action_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Discrete(2)

    def observation_space(self, params):
        from gymnax.environments import spaces

        return spaces.Box(0.0, 100.0, (3,), jnp.float32)


def _walk(env, params, batch_axes, steps: int = 16):
    """Outputs of ``steps`` random steps of ``env`` vmapped over the leading ``batch_axes`` shape (one vmap per
    axis), from fixed keys: the same for any reset strategy that resets exactly like gymnax."""
    step, reset = env.step, env.reset
    for _ in batch_axes:
        step, reset = jax.vmap(step, in_axes=(0, 0, 0, None)), jax.vmap(reset, in_axes=(0, None))
    keys = jax.random.split(jax.random.PRNGKey(0), (steps + 1,) + tuple(batch_axes))
    key_actions = jax.random.split(jax.random.PRNGKey(1), steps)
    _, state = reset(keys[0], params)

    def one(state, keys_t):
        key_env, key_action = keys_t
        action = jax.random.bernoulli(key_action, 0.7, shape=batch_axes).astype(jnp.int32)
        obs, state, reward, terminated, truncated, info = step(key_env, state, action, params)
        return state, (obs, state, terminated, truncated, info["final_observation"])

    return jax.jit(lambda s: jax.lax.scan(one, s, (keys[1:], key_actions))[1])(state)


@pytest.mark.parametrize("batch_axes", [(), (5,), (2, 3)], ids=["one env", "vmapped", "vmapped twice (seeds)"])
def test_sparse_reset_resets_exactly_like_the_select(batch_axes):
    plain = _walk(FiveToSixStep(Walk()), WalkParams(), batch_axes)
    sparse = _walk(FiveToSixStep(Walk(), sparse_reset=True), WalkParams(), batch_axes)
    jax.tree.map(np.testing.assert_array_equal, sparse, plain)
    terminated, truncated = plain[2], plain[3]
    assert np.any(terminated) and np.any(truncated)  # both endings happened, and were reset alike


def test_sparse_reset_with_params_batched_along_the_envs_falls_back_to_the_select():
    params = WalkParams(goal=jnp.array([1, 2, 3]))
    per_env = WalkParams(max_steps_in_episode=None, goal=0)  # vmap axes: the goal differs per env

    def run(sparse):
        env = FiveToSixStep(Walk(), WalkParams(), sparse_reset=sparse)
        keys = jax.random.split(jax.random.PRNGKey(1), 3)
        _, state = jax.vmap(env.reset, in_axes=(0, per_env))(keys, params)
        out = jax.vmap(env.step, in_axes=(0, 0, None, per_env))(keys, state, jnp.int32(1), params)
        return out[:5]

    jax.tree.map(np.testing.assert_array_equal, run(True), run(False))


def test_reset_where_done_computes_the_reset_only_for_finished_envs():
    calls = []

    def reset_env(key, params):
        calls.append(key.shape)
        return jnp.zeros(2) + key[0], jnp.float32(7.0)

    done = jnp.array([False, True, False, True])
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    obs, state = jax.vmap(lambda *args: reset_where_done(reset_env, *args))(
        done, keys, None, jnp.ones((4, 2)), jnp.zeros(4))
    assert calls and all(shape == (2,) for shape in calls)  # one env's key: the reset never runs over the batch
    obs, keys = np.asarray(obs), np.asarray(keys)
    np.testing.assert_array_equal(state, [0.0, 7.0, 0.0, 7.0])
    np.testing.assert_array_equal(obs[[0, 2]], np.ones((2, 2)))
    np.testing.assert_array_equal(obs[[1, 3], 0], keys[[1, 3], 0].astype(np.float32))


def test_sparse_reset_and_env_episode_metrics_train_on_two_devices_under_shard_map(monkeypatch):
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))
    envs.register("Walk-sparse-v0", lambda: FiveToSixStep(Walk(), sparse_reset=True))
    result = agents.ppo.train(PPOConfig(**TINY), "Walk-sparse-v0", devices=2, backend="shard_map", log_every=2)
    record = result.metrics[-1]
    assert record["episodes"] > 0 and np.isfinite(record["loss/total"])
    assert _replicated(result.state.agent.params)
    # Walk's info["episode_metrics"] as the engine logs them: a mean over the episodes that ended
    assert 0 < record["episode/walk/reached_goal"] <= 1


# --- Craftax ----------------------------------------------------------------------------------------------------
#
# One compiled program serves every Craftax check (compiling Craftax's step takes about a minute on a CPU): the
# engine's collector, pmapped over 2 devices x 2 envs, stepping ``LIMIT`` NOOPs per call. The first call starts from
# blank states at the time limit, which the adapter's auto-reset turns into fresh worlds (no reset program to
# compile); the second starts from crafted states.


NOOP = 0
CRAFTAX_BLOCKS = 17  # Craftax-Classic's block types: its view is [7, 9, 17 blocks + 4 mob kinds], then the inventory


@pytest.fixture(scope="module")
def craftax():
    """``(first, second)``: the ``(end state, Transition)`` of the two collects described above."""
    _needs("craftax")
    from rlpar.core import rollout

    env, params = envs.make("Craftax-Classic-Symbolic-v1", max_timesteps=LIMIT)

    def noop(agent_state, carry, obs, key):
        return jnp.zeros(obs.shape[:1], jnp.int32), carry, ()

    keep_final = lambda agent_state, carry, final_obs: final_obs  # Transition.final = the final observations
    collect = rollout.make_collector(env, params, noop, LIMIT, bootstrap=keep_final)
    collect = jax.pmap(collect, axis_name="devices", in_axes=(None, 0), devices=jax.devices()[:2])
    obs_shape = (2, 2) + env.observation_space(params).shape
    shapes = jax.eval_shape(lambda k: env.reset(k, params)[1], jax.random.PRNGKey(0))
    blank = jax.tree.map(lambda x: jnp.zeros((2, 2) + x.shape, x.dtype), shapes)
    blank = blank.replace(env_state=blank.env_state.replace(timestep=jnp.full((2, 2), LIMIT, jnp.int32)))
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    first = collect((), rollout.RolloutState(blank, jnp.zeros(obs_shape), (), keys))
    # Crafted from the fresh worlds, now at timestep LIMIT - 1: device 0 holds envs a, b; device 1 holds c, d.
    # a: alive, has collected wood; b: dead (health 0); c: dead at timestep 1; d: alive at timestep 0.
    state = first[0].env_state.env_state
    wood = env.unwrapped.achievements.index("collect_wood")
    crafted = state.replace(
        player_health=state.player_health.at[0, 1].set(0).at[1, 0].set(0),
        timestep=jnp.array([[LIMIT - 1, LIMIT - 1], [1, 0]], jnp.int32),
        achievements=state.achievements.at[0, 0, wood].set(True),
    )
    start = first[0].replace(env_state=first[0].env_state.replace(env_state=crafted))
    return first, collect((), start), env


def _flags(traj, t):
    """``[(terminated, truncated)]`` of step ``t`` for envs a, b, c, d."""
    return _split(np.asarray(traj.terminated[:, t]).reshape(-1), np.asarray(traj.truncated[:, t]).reshape(-1))


def test_craftax_blank_states_come_back_as_fresh_worlds(craftax):
    (end, traj), _, _ = craftax
    assert np.asarray(traj.episode_done[:, 0]).all()  # the blank states ended at once ...
    assert not np.asarray(traj.episode_done[:, 1:]).any()  # ... and the new episodes ran on
    np.testing.assert_array_equal(np.asarray(end.env_state.env_state.timestep), np.full((2, 2), LIMIT - 1))


def test_craftax_time_limit_truncates_and_death_terminates_even_at_the_limit(craftax):
    _, (end, traj), _ = craftax
    assert _flags(traj, 0) == [(False, True), (True, False), (True, False), (False, False)]  # a, b, c, d
    for t in range(1, LIMIT - 1):
        assert _flags(traj, t) == [(False, False)] * 4
    assert _flags(traj, LIMIT - 1) == [(False, False)] * 3 + [(False, True)]  # d reaches the limit
    # auto-reset: a, b and c restarted at step 0, d at the last step
    np.testing.assert_array_equal(np.asarray(end.env_state.env_state.timestep), [[LIMIT - 1] * 2, [LIMIT - 1, 0]])


def test_craftax_final_observation_is_the_ended_episodes(craftax):
    _, (_, traj), _ = craftax
    view = lambda obs: np.asarray(obs)[: 7 * 9 * (CRAFTAX_BLOCKS + 4)].reshape(7, 9, -1)[..., :CRAFTAX_BLOCKS]
    final_a, before_a, after_a = traj.final[0, 0, 0], traj.obs[0, 0, 0], traj.obs[0, 1, 0]  # [device, t, env]
    np.testing.assert_array_equal(view(final_a), view(before_a))  # a NOOP leaves the blocks around the player
    assert not np.array_equal(view(final_a), view(after_a))  # the next observation is a new world's
    assert not np.asarray(traj.final[0, 0, 1]).any()  # b terminated: nothing to bootstrap from


def test_craftax_achievements_reach_the_episode_metrics(craftax):
    from rlpar.core import rollout
    from rlpar.run import records

    _, (_, traj), env = craftax
    metrics = traj.episode_metrics
    assert len(metrics) == len(env.unwrapped.achievements) + 1 == 23
    np.testing.assert_array_equal(np.asarray(metrics["achievements/collect_wood"][:, 0]).reshape(-1), [1, 0, 0, 0])
    np.testing.assert_array_equal(np.asarray(metrics["achievements/count"][:, 0]).reshape(-1), [1, 0, 0, 0])
    # as the engine logs them: means over the episodes that ended (a, b, c at step 0, d at the last step)
    per_device = [rollout.episode_metrics(jax.tree.map(lambda x: x[d], traj), None) for d in range(2)]
    raw = jax.tree.map(lambda *sums: np.sum(sums), *per_device)
    record = records.summarize(raw, update=1, env_steps=0, seconds=1.0, steps_in_chunk=0)
    assert record["episodes"] == 4 and record["episode/achievements/collect_wood"] == 0.25
    assert record["episode/achievements/count"] == 0.25
    assert record["episode_length"] == (6 + 6 + 6 + 11) / 4  # a, b, c: 5 steps before the crafting, then 1; d: 5 + 6


def test_craftax_full_builds_with_its_spaces_achievements_and_time_limit():
    _needs("craftax")
    env, params = envs.make("Craftax-Symbolic-v1")
    assert env.observation_space(params).shape == (8268,) and env.action_space(params).n == 43
    assert len(env.unwrapped.achievements) == 67 and policy.episode_limit(env, params) == 100_000


# --- brax ---------------------------------------------------------------------------------------------------------
#
# As for Craftax, one compiled collector on 2 devices x 2 envs: device 0's envs hold still (action 0), device 1's
# push right (+1: the pole falls). Env d starts as a copy of c; the second collect sets d's clock so that the time
# limit comes exactly at its fall.

BRAX_LIMIT = 20


@pytest.fixture(scope="module")
def pendulum():
    """``(first, second, fall)``: ``(end state, Transition)`` of both collects, and the step at which c fell."""
    _needs("brax")
    from rlpar.core import rollout

    env, params = envs.make("brax-inverted_pendulum", episode_length=BRAX_LIMIT)

    def push_on_device_1(agent_state, carry, obs, key):
        push = jax.lax.axis_index("devices").astype(jnp.float32)
        return jnp.full(obs.shape[:1] + (1,), push), carry, ()

    keep_final = lambda agent_state, carry, final_obs: final_obs
    collect = rollout.make_collector(env, params, push_on_device_1, BRAX_LIMIT, bootstrap=keep_final)
    collect = jax.pmap(collect, axis_name="devices", in_axes=(None, 0), devices=jax.devices()[:2])
    reset = jax.pmap(jax.vmap(lambda key: env.reset(key, params)), devices=jax.devices()[:2])
    obs, state = reset(jax.random.split(jax.random.PRNGKey(0), (2, 2)))
    copy_c_to_d = lambda x: x.at[1, 1].set(x[1, 0])
    obs, state = jax.tree.map(copy_c_to_d, obs), jax.tree.map(copy_c_to_d, state)
    keys = jax.random.split(jax.random.PRNGKey(1), 2)
    first = collect((), rollout.RolloutState(state, obs, (), keys))
    fall = int(np.argmax(np.asarray(first[1].terminated[1, :, 0])))
    info = state.env_state.info
    steps = info["steps"].at[1, 1].set(BRAX_LIMIT - (fall + 1))  # the limit arrives with d's fall
    clocked = state.replace(env_state=state.env_state.replace(info={**info, "steps": steps}))
    return first, collect((), rollout.RolloutState(clocked, obs, (), keys)), fall


def _ends(traj, device, env):
    """``[(step, terminated, truncated)]`` where one env's episodes ended."""
    term, trunc = np.asarray(traj.terminated[device, :, env]), np.asarray(traj.truncated[device, :, env])
    return [(t, bool(term[t]), bool(trunc[t])) for t in np.flatnonzero(term | trunc)]


def test_brax_time_limit_truncates_and_a_fall_terminates(pendulum):
    (end, traj), _, fall = pendulum
    assert _ends(traj, 0, 0) == _ends(traj, 0, 1) == [(BRAX_LIMIT - 1, False, True)]  # a, b: balanced, cut
    assert 0 < fall < BRAX_LIMIT - 1
    assert _ends(traj, 1, 0)[0] == _ends(traj, 1, 1)[0] == (fall, True, False)  # c, d: fell
    # obs [x, angle, x', angle']; a reset puts the pole within 0.01 rad of upright, at rest
    assert 0.1 < abs(traj.obs[1, fall, 0, 1]) <= 0.2 and abs(traj.obs[1, fall + 1, 0, 1]) < 0.02  # c: then reset
    # a's final observation continues its episode (one step on from the last observation); then a fresh one
    final, last, fresh = (np.asarray(x) for x in (traj.final[0, -1, 0], traj.obs[0, -1, 0], end.obs[0, 0]))
    np.testing.assert_allclose(final, last, atol=0.1)
    assert final.any() and not np.allclose(final, fresh) and abs(fresh[1]) < 0.02


def test_brax_fall_at_the_time_limit_is_a_termination(pendulum):
    _, (_, traj), fall = pendulum
    assert _ends(traj, 1, 1)[0] == (fall, True, False)  # d: its clock reached the limit as it fell


@pytest.fixture(scope="module")
def brax_run(tmp_path_factory):
    """PPO on brax-inverted_pendulum on 2 devices through the CLI, with a run dir."""
    _needs("brax")
    run_dir = tmp_path_factory.mktemp("brax") / "run"
    argv = ["ppo", "--env", "brax-inverted_pendulum", "--devices", "2", "--num-envs", "4", "--num-steps", "16",
            "--total-timesteps", "128", "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "16",
            "--log-every", "1", "--checkpoint-every", "0", "--run-dir", str(run_dir)]
    assert train_cli.main(argv) == 0
    return run_dir


def test_brax_trains_on_two_devices_through_the_cli(brax_run):
    records = [json.loads(line) for line in (brax_run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["env_steps"] == 128 and np.isfinite(records[-1]["loss/total"])
    assert records[-1]["episodes"] > 0  # an untrained policy lets the pole fall within 128 steps


def test_brax_gif_frames_or_a_one_line_refusal(brax_run, pendulum, tmp_path):
    """What ``rlpar.evaluate --gif`` needs from the adapter (the episodes themselves are the engine's, tested in
    tests/test_evaluate.py): the renderer check before any episode runs, then frames of brax states."""
    (end, _), _, _ = pendulum
    try:
        gif.check_gif(brax_run, tmp_path / "pendulum.gif")
    except ValueError as err:  # no OpenGL for MuJoCo on this machine: one line, before anything runs
        assert str(err).startswith("--gif: brax draws through MuJoCo's OpenGL renderer") and "\n" not in str(err)
        return
    env, _ = envs.make("brax-inverted_pendulum")
    two_steps = jax.tree.map(lambda x: x[0], end.env_state.env_state)  # device 0's two envs as a 2-step episode
    frames = env.unwrapped.render_frames(two_steps)
    assert frames.shape == (2, 240, 320, 3) and frames.dtype == np.uint8 and frames.std() > 0


def test_time_limits_reach_evaluate():
    _needs("brax")
    env, params = envs.make("brax-inverted_pendulum", episode_length=BRAX_LIMIT)
    assert policy.episode_limit(env, params) == BRAX_LIMIT  # brax: from the adapter, through the wrappers
    assert policy.episode_limit(*envs.make("CartPole-v1")) == 500  # gymnax: from the params


def test_brax_backend_in_the_id_and_bad_names_are_one_line():
    _needs("brax")
    env, _ = envs.make("brax-inverted_pendulum@generalized")
    assert env.unwrapped.backend == "generalized" and env.name == "brax-inverted_pendulum@generalized"
    assert envs.make("brax-inverted_pendulum")[0].unwrapped.backend == "spring"  # the default, measured fastest
    with pytest.raises(ValueError, match=r"brax backend 'warp': must be one of generalized, positional, spring, mjx"):
        envs.make("brax-inverted_pendulum@warp")
    with pytest.raises(ValueError, match=r"unknown brax env 'brax-inverted_pendulm'. Did you mean "
                                         r"brax-inverted_pendulum"):
        envs.make("brax-inverted_pendulm")
