import jax.numpy as jnp
import numpy as np
import pytest

from agents.advantages import backward_sums, gae, normalize
from rlpar.core import platform

# Hand-worked example, T=3 steps x B=2 envs, gamma = lambda = 0.5 (so gamma * lambda = 0.25).
#
# env 0: no episode ends. r = [1, 0, 2], V = [1, 2, 1], last V = 4, next V = [2, 1, 4]
#   delta = [1 + .5*2 - 1, 0 + .5*1 - 2, 2 + .5*4 - 1] = [1, -1.5, 3]
#   A2 = 3;  A1 = -1.5 + .25*3 = -0.75;  A0 = 1 + .25*(-0.75) = 0.8125
# env 1: t0 truncated (time limit; V(final obs) = 6), t1 terminated, t2 runs on. r = [1, 1, 1], V = [0, 1, 2], last 8
#   t0: bootstrap from the final observation, not from V[1] (next episode): delta = 1 + .5*6 - 0 = 4, trace cut -> A0 = 4
#   t1: terminal, no bootstrap (final_value 99 there must be ignored): delta = 1 - 1 = 0 -> A1 = 0
#   t2: delta = 1 + .5*8 - 2 = 3 -> A2 = 3
REWARD = [[1.0, 1.0], [0.0, 1.0], [2.0, 1.0]]
VALUE = [[1.0, 0.0], [2.0, 1.0], [1.0, 2.0]]
TERMINATED = [[False, False], [False, True], [False, False]]
TRUNCATED = [[False, True], [False, False], [False, False]]
FINAL_VALUE = [[0.0, 6.0], [0.0, 99.0], [0.0, 0.0]]
LAST_VALUE = [4.0, 8.0]
EXPECTED_ADV = [[0.8125, 4.0], [-0.75, 0.0], [3.0, 3.0]]


def _gae(**overrides):
    args = dict(
        reward=REWARD, value=VALUE, terminated=TERMINATED, truncated=TRUNCATED, final_value=FINAL_VALUE,
        last_value=LAST_VALUE,
    )
    args.update(overrides)
    args = {k: jnp.asarray(v) for k, v in args.items()}
    return gae(**args, gamma=0.5, gae_lambda=0.5)


def test_gae_hand_worked_example_with_truncation():
    adv, ret = _gae()
    np.testing.assert_allclose(adv, EXPECTED_ADV, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ret, np.asarray(EXPECTED_ADV) + np.asarray(VALUE), atol=1e-6)


def test_truncation_treated_as_termination_would_differ():
    # The same data with the time limit read as termination loses the bootstrap: A0 of env 1 becomes 1, not 4.
    adv, _ = _gae(terminated=[[False, True], [False, True], [False, False]])
    assert adv[0, 1] == pytest.approx(1.0)
    assert adv[0, 1] != pytest.approx(EXPECTED_ADV[0][1])


def test_terminated_and_truncated_together_is_terminal():
    # gymnax can flag both on the last allowed step if the episode also fails: no bootstrap then.
    adv, _ = _gae(terminated=[[False, True], [False, True], [False, False]], truncated=TRUNCATED)
    assert adv[0, 1] == pytest.approx(1.0)


def test_gae_lambda_one_is_discounted_return_minus_value():
    # One env, no episode ends, gamma=0.5, lambda=1: A_t = sum_k gamma^k r_{t+k} + gamma^(T-t) V_last - V_t.
    r = jnp.array([[1.0], [2.0], [3.0]])
    v = jnp.array([[0.5], [0.25], [1.0]])
    z = jnp.zeros((3, 1), bool)
    adv, _ = gae(r, v, z, z, jnp.zeros((3, 1)), jnp.array([4.0]), 0.5, 1.0)
    # A2 = 3 + .5*4 - 1 = 4; A1 = 2 + .5*3 + .25*4 - .25 = 4.25; A0 = 1 + .5*2 + .25*3 + .125*4 - .5 = 2.75
    np.testing.assert_allclose(adv[:, 0], [2.75, 4.25, 4.0], atol=1e-6)


def test_gae_rejects_wrong_ranks():
    with pytest.raises(AssertionError):
        gae(jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), jnp.zeros(3), jnp.zeros(()), 0.9, 0.9)


def test_normalize_without_axis():
    x = jnp.array([1.0, 2.0, 3.0, 4.0])  # mean 2.5, population std sqrt(1.25)
    np.testing.assert_allclose(normalize(x, None), (np.array([1, 2, 3, 4]) - 2.5) / np.sqrt(1.25), rtol=1e-5)


@pytest.mark.parametrize("method", platform.GAE_METHODS)
def test_each_gae_method_gives_the_hand_worked_example(method):
    with platform.forcing(gae_method=method):
        adv, ret = _gae()
    np.testing.assert_allclose(adv, EXPECTED_ADV, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ret, np.asarray(EXPECTED_ADV) + np.asarray(VALUE), atol=1e-6)


@pytest.mark.parametrize("method", platform.GAE_METHODS)
@pytest.mark.parametrize("shape", [(1, 3), (2, 1), (37, 5), (128, 2, 3)])
def test_backward_sums_match_a_numpy_loop(method, shape):
    # y_t = x_t + decay_t * y_{t+1}, y_T = 0, in float64 by hand; decays with zeros (episode ends) and ones.
    rng = np.random.default_rng(sum(shape))
    x = rng.normal(size=shape).astype(np.float32)
    decay = (rng.uniform(size=shape) * (rng.uniform(size=shape) > 0.1)).astype(np.float32)
    decay[rng.uniform(size=shape) < 0.1] = 1.0
    expected, y = np.zeros(shape), np.zeros(shape[1:])
    for t in reversed(range(shape[0])):
        y = x[t].astype(np.float64) + decay[t] * y
        expected[t] = y
    got = backward_sums(jnp.asarray(x), jnp.asarray(decay), method)
    assert got.shape == shape and got.dtype == jnp.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_backward_sums_refuses_an_unknown_method():
    with pytest.raises(ValueError, match="method 'parallel': expected scan or associative"):
        backward_sums(jnp.zeros((3, 2)), jnp.zeros((3, 2)), "parallel")


@pytest.mark.slow  # moved out of the default run for its length; CI runs the slow set too
def test_ppo_takes_the_forced_gae_method_and_learns_the_same(monkeypatch):
    # One PPO update on CartPole with each method: the same parameters up to float rounding (the advantages differ
    # in the last bits only), and not the parameters it started from; the method traced is the one forced.
    import jax

    import envs
    from agents import advantages

    traced = []
    original = advantages.backward_sums

    def spy(x, decay, method=None):
        traced.append(platform.gae_method())
        return original(x, decay, method)

    monkeypatch.setattr(advantages, "backward_sums", spy)
    from agents.ppo import PPOConfig, make_ppo
    from rlpar.core.program import make_program

    config = PPOConfig(num_envs=4, num_steps=32, num_minibatches=2, update_epochs=2)
    env, env_params = envs.make("CartPole-v1")
    params = {}
    for method in platform.GAE_METHODS:
        with platform.forcing(gae_method=method):
            program = make_program(make_ppo(config, env, env_params, 4, None), env, env_params, 4, 32, None)
            state = program.init(jax.random.key(0), jax.random.key(1))
            params[method] = jax.jit(program.update)(state)[0].agent.params
        assert traced[-1] == method
    start = jax.tree.leaves(state.agent.params)
    scan, associative = jax.tree.leaves(params["scan"]), jax.tree.leaves(params["associative"])
    assert max(float(jnp.abs(a - b).max()) for a, b in zip(scan, start)) > 1e-4
    for a, b in zip(scan, associative):
        np.testing.assert_allclose(a, b, atol=1e-5)
