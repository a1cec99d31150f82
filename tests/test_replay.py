"""The off-policy agents' shared pieces (agents/replay.py): transitions from a collect with truncation, the ring
buffer, target updates, warm-up, the replay config's checks, and the buffer under both device backends."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
from agents.dqn import DQNConfig
from agents.replay import ReplayConfig, ReplayItem, gradient_steps, make_replay, transitions, update_target
from rlpar.core import parallel
from rlpar.core.rollout import Experience, RolloutState, Transition
from tests.helpers import jaxpr_eqns


def test_transitions_take_the_final_observation_where_a_step_was_truncated():
    # T = 3 steps of B = 2 envs; obs[t, b] = 10 t + b. Env 0 is truncated at t = 1 (its episode was cut at 99; the
    # collector's next observation, 20, already starts a new episode); env 1 terminates at t = 2.
    obs = jnp.array([[0.0, 1.0], [10.0, 11.0], [20.0, 21.0]])[..., None]
    truncated = jnp.array([[False, False], [True, False], [False, False]])
    terminated = jnp.array([[False, False], [False, False], [False, True]])
    final = jnp.where(truncated[..., None], 99.0, 0.0)  # what the collector keeps with bootstrap = final_observation
    zeros = jnp.zeros((3, 2))
    traj = Transition(obs=obs, action=jnp.zeros((3, 2), jnp.int32), reward=jnp.arange(6.0).reshape(3, 2),
                      terminated=terminated, truncated=truncated, final=final, episode_return=zeros,
                      episode_length=zeros.astype(jnp.int32), episode_done=truncated | terminated, extras=())
    end = RolloutState(env_state=None, obs=jnp.array([[30.0], [31.0]]), carry=(), key=None)
    items = transitions(Experience(traj, None, end))
    np.testing.assert_array_equal(items.obs[:, 0], [0, 1, 10, 11, 20, 21])  # time-major, flattened
    np.testing.assert_array_equal(items.next_obs[:, 0], [10, 11, 99, 21, 30, 31])
    np.testing.assert_array_equal(items.terminated, [False] * 5 + [True])
    np.testing.assert_array_equal(items.reward, [0, 1, 2, 3, 4, 5])


def _items(values):
    values = jnp.asarray(values, jnp.float32)
    n = values.shape[0]
    return ReplayItem(values[:, None], jnp.zeros(n, jnp.int32), values, values[:, None], jnp.zeros(n, bool))


def test_ring_buffer_keeps_the_newest_items_and_samples_only_stored_ones():
    replay = make_replay(capacity=8, sample_size=8)

    def draws(state):  # 64 minibatches of 8
        return jax.vmap(lambda key: replay.sample(state, key))(jax.random.split(jax.random.PRNGKey(0), 64))

    state = replay.init(jax.tree.map(lambda x: x[0], _items([0.0])))
    state = replay.add(state, _items(range(5)))
    assert int(replay.size(state)) == 5
    assert set(np.asarray(draws(state).reward).ravel().tolist()) == {0, 1, 2, 3, 4}
    state = replay.add(state, _items(range(5, 10)))  # 10 items into 8 places: 0 and 1 are overwritten
    assert int(replay.size(state)) == 8
    sample = draws(state)
    assert set(np.asarray(sample.reward).ravel().tolist()) == set(range(2, 10))
    np.testing.assert_array_equal(sample.obs[..., 0], sample.reward)  # items stay whole


def test_target_update_copies_exactly_or_averages_when_due():
    target, online = {"w": jnp.zeros(3)}, {"w": jnp.array([1.0, -2.0, 0.1])}
    np.testing.assert_array_equal(update_target(target, online, 6, 3, 1.0)["w"], online["w"])  # due, tau 1: a copy
    np.testing.assert_array_equal(update_target(target, online, 7, 3, 1.0)["w"], target["w"])  # not due
    # Polyak: 0.25 * online + 0.75 * target
    np.testing.assert_allclose(update_target(target, online, 1, 1, 0.25)["w"], [0.25, -0.5, 0.025], rtol=1e-6)


def test_gradient_steps_wait_during_warm_up_and_average_the_steps_otherwise():
    replay = make_replay(capacity=4, sample_size=2)
    buffer = replay.add(replay.init(jax.tree.map(lambda x: x[0], _items([0.0]))), _items([1.0, 1.0, 1.0]))

    def step(count, batch, key):
        return count + 1, {"reward": jnp.mean(batch.reward) * count}

    count, info = gradient_steps(step, jnp.int32(0), replay, buffer, jax.random.PRNGKey(0), 3, jnp.bool_(True))
    assert int(count) == 3 and float(info["reward"]) == pytest.approx((0 + 1 + 2) / 3)
    count, info = gradient_steps(step, jnp.int32(0), replay, buffer, jax.random.PRNGKey(0), 3, jnp.bool_(False))
    assert int(count) == 0 and float(info["reward"]) == 0.0


def test_positions_are_uniform_over_the_stored_items_and_take_returns_them_whole():
    replay = make_replay(capacity=8, sample_size=4)
    state = replay.add(replay.init(jax.tree.map(lambda x: x[0], _items([0.0]))), _items(range(5)))
    at = np.asarray(replay.positions(state, jax.random.PRNGKey(1), 2000))
    assert at.shape == (2000, 4) and at.dtype == np.int32
    counts = np.bincount(at.ravel(), minlength=8)
    assert counts[5:].sum() == 0  # never an empty place
    assert counts[:5].min() > 0.8 * 8000 / 5 and counts[:5].max() < 1.2 * 8000 / 5  # about 1,600 each
    items = replay.take(state, jnp.array([4, 0, 4, 2]))
    np.testing.assert_array_equal(items.reward, [4, 0, 4, 2])
    np.testing.assert_array_equal(items.obs[:, 0], items.reward)
    state = replay.add(state, _items(range(5, 12)))  # wrapped: every place holds an item
    assert set(np.asarray(replay.positions(state, jax.random.PRNGKey(2), 200)).ravel().tolist()) == set(range(8))


def test_gradient_steps_draw_before_their_loop_and_hand_each_step_its_slice():
    replay = make_replay(capacity=16, sample_size=3)
    buffer = replay.add(replay.init(jax.tree.map(lambda x: x[0], _items([0.0]))), _items(range(16)))
    draw = lambda key, n: {"noise": jax.random.normal(key, (n, 2)), "step": jnp.arange(n)}

    def step(count, batch, drawn):
        return count + 1, {"step": drawn["step"], "noise": drawn["noise"], "reward": batch.reward}

    def run(key):
        return gradient_steps(step, jnp.int32(0), replay, buffer, key, 5, jnp.bool_(True), draw)

    count, info = run(jax.random.PRNGKey(0))
    assert int(count) == 5
    assert float(info["step"]) == pytest.approx(2.0)  # the mean of steps 0..4: each got its own slice
    # the same draws, made by hand: positions and then the steps' values, from the halves of one split
    key_positions, key_steps = jax.random.split(jax.random.PRNGKey(0))
    np.testing.assert_allclose(info["noise"], jnp.mean(draw(key_steps, 5)["noise"], axis=0), rtol=1e-6)
    expected = jnp.mean(replay.positions(buffer, key_positions, 5).astype(jnp.float32), axis=0)
    np.testing.assert_allclose(info["reward"], expected, rtol=1e-6)  # item i holds reward i
    # nothing random is drawn inside the steps' loop
    jaxpr = jax.make_jaxpr(run)(jax.random.PRNGKey(0))
    bodies = [e.params["jaxpr"] for e in jaxpr_eqns(jaxpr.jaxpr) if e.primitive.name == "scan"]
    assert bodies and not any(e.primitive.name in ("random_bits", "threefry2x32", "random_split", "random_wrap")
                              for body in bodies for e in jaxpr_eqns(body.jaxpr))


@pytest.mark.parametrize("changes, devices, message", [
    (dict(buffer_size=64, minibatch_size=128), 1, "buffer_size=64 is smaller than minibatch_size=128"),
    (dict(buffer_size=1026), 4, "buffer_size=1026 is not divisible by the device count 4"),
    (dict(minibatch_size=6), 4, "minibatch_size=6 is not divisible by the device count 4"),
    (dict(buffer_size=512, num_envs=8, num_steps=128), 1, "buffer_size=512 is smaller than one collect"),
    (dict(learning_starts=1_000_000), 1, "learning_starts=1000000: must be an integer in [0, 999424)"),
    (dict(learning_starts=-1), 1, "learning_starts=-1: must be an integer in [0, "),
    (dict(tau=0.0), 1, "tau=0.0: must be in (0, 1]"),
    (dict(gradient_steps=0), 1, "gradient_steps=0: must be a positive integer"),
    (dict(target_update_every=0), 1, "target_update_every=0: must be a positive integer"),
])
def test_replay_config_names_the_bad_field(changes, devices, message):
    with pytest.raises(ValueError, match=None) as info:
        ReplayConfig(**changes).validate(devices)
    assert message in str(info.value)


def test_first_learning_update_counts_whole_collects():
    config = ReplayConfig(num_envs=8, num_steps=8, learning_starts=100)  # 64 steps per update: update 2 reaches 128
    assert config.first_learning_update == 2
    assert config.replace(learning_starts=0).first_learning_update == 1
    assert config.replace(learning_starts=128).first_learning_update == 2


@pytest.mark.slow  # moved out of the default run for its length; CI runs the slow set too
def test_both_backends_give_the_same_dqn_run_buffers_included():
    # The buffer's pure functions under jax.pmap and under jax.jit(jax.shard_map): the same parameters and the same
    # per-device buffers after learning has begun.
    config = DQNConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 4, buffer_size=256, minibatch_size=8,
                       learning_starts=32, gradient_steps=2, target_update_every=2, hidden_sizes=(8,))
    runs = [agents.dqn.train(config, "CartPole-v1", devices=2, log_every=4, backend=b) for b in ("pmap", "shard_map")]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), runs[0].params, runs[1].params)
    buffers = [parallel.replicas(r.state.agent.buffer) for r in runs]
    for device in range(2):
        jax.tree.map(np.testing.assert_array_equal, buffers[0][device], buffers[1][device])
    assert int(buffers[0][0].current_index) == 64  # 4 updates x 8 steps x 2 envs on this device
