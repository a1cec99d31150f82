"""PQN (agents.pqn): its math by hand and against independent references, device synchronisation, probe
environments with known Q-values, resume after SIGKILL, seeds and sweeps in one compile, evaluation, the refusal of
continuous actions, and (slow) solving CartPole-v1 with the defaults."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents.pqn as pqn
import envs
from agents import platform, shuffle
from agents.pqn import Batch, PQNConfig, make_pqn
from agents.pqn.qlearning import epsilon_greedy, epsilon_schedule, q_lambda_returns, td_loss
from agents.spaces import discrete_actions
from rlpar.core import hosts, parallel
from rlpar.run import rundir
from rlpar.run.checkpoint import Checkpoints
from rlpar.run.runner import RunConfig, run
from rlpar.tools import evaluate, registry
from rlpar.tools import train as train_cli

REPO = Path(__file__).resolve().parents[1]
SIGKILL_AFTER = Path(__file__).with_name("sigkill_after.py")


# ---------------------------------------------------------------------------------------------------- the math


def _returns(reward, q_max, terminated, truncated, final, last, gamma, q_lambda):
    arrays = [jnp.asarray(x, jnp.float32) for x in (reward, q_max)]
    flags = [jnp.asarray(x, bool) for x in (terminated, truncated)]
    out = q_lambda_returns(*arrays, *flags, jnp.asarray(final, jnp.float32), jnp.asarray(last, jnp.float32),
                           gamma, q_lambda)
    return np.asarray(out)


def test_q_lambda_returns_by_hand():
    # T = 3 steps, B = 2 envs, gamma = 0.5, lambda = 0.5. G_t = r_t + gamma * next_t with
    # next_t = (1 - lambda) * V_{t+1} + lambda * G_{t+1} (0 after a termination, V(final obs) after a truncation).
    # env 0, no episode end, V = q_max[1:] = 2, 4 then last_value 8:
    #   G_2 = 1 + 0.5 * 8 = 5;  G_1 = 1 + 0.5 * (0.5 * 4 + 0.5 * 5) = 3.25;
    #   G_0 = 1 + 0.5 * (0.5 * 2 + 0.5 * 3.25) = 2.3125
    # env 1, terminated at t = 0, truncated at t = 1 (final value 6), last_value 40:
    #   G_2 = 3 + 0.5 * 40 = 23;  G_1 = 2 + 0.5 * 6 = 5 (not 20 or 23: those are the next episode's);  G_0 = 1 + 0 = 1
    reward = [[1.0, 1.0], [1.0, 2.0], [1.0, 3.0]]
    q_max = [[0.0, 0.0], [2.0, 10.0], [4.0, 20.0]]
    terminated = [[0, 1], [0, 0], [0, 0]]
    truncated = [[0, 0], [0, 1], [0, 0]]
    final = [[0.0, 0.0], [0.0, 6.0], [0.0, 0.0]]
    got = _returns(reward, q_max, terminated, truncated, final, [8.0, 40.0], 0.5, 0.5)
    np.testing.assert_allclose(got, [[2.3125, 1.0], [3.25, 5.0], [5.0, 23.0]], rtol=1e-6)


def test_q_lambda_zero_and_one_are_one_step_q_learning_and_discounted_returns():
    # env 0 of the example above: lambda = 0 -> r + gamma * V_{t+1} = 1 + 0.5 * (2, 4, 8) = (2, 3, 5);
    # lambda = 1 -> discounted rewards bootstrapped at the rollout end: 1 + 0.5 * (1 + 0.5 * (1 + 0.5 * 8)) = 2.75
    args = ([[1.0], [1.0], [1.0]], [[0.0], [2.0], [4.0]], [[0], [0], [0]], [[0], [0], [0]], [[0.0]] * 3, [8.0])
    np.testing.assert_allclose(_returns(*args, 0.5, 0.0)[:, 0], [2.0, 3.0, 5.0])
    np.testing.assert_allclose(_returns(*args, 0.5, 1.0)[:, 0], [2.75, 3.5, 5.0])


def _forward_view(reward, q_max, terminated, truncated, final, last, gamma, lam):
    """The lambda-return as a weighted mean of n-step returns (the forward view), step by step in numpy:
    G = (1 - lam) * sum_{n < N} lam^(n-1) G^(n) + lam^(N-1) G^(N), N the steps to the episode's or rollout's end."""
    steps, envs_ = reward.shape
    next_value = np.concatenate([q_max[1:], last[None]])
    out = np.zeros((steps, envs_))
    for b in range(envs_):
        for t in range(steps):
            n_step, acc, discount = [], 0.0, 1.0
            for k in range(t, steps):
                acc += discount * reward[k, b]
                discount *= gamma
                if terminated[k, b]:
                    n_step.append(acc)
                    break
                if truncated[k, b]:
                    n_step.append(acc + discount * final[k, b])
                    break
                n_step.append(acc + discount * next_value[k, b])
            weights = [(1 - lam) * lam ** (n - 1) for n in range(1, len(n_step))] + [lam ** (len(n_step) - 1)]
            out[t, b] = sum(w * g for w, g in zip(weights, n_step))
    return out


def _random_rollout(seed, steps=9, envs_=6):
    rng = np.random.default_rng(seed)
    done = rng.random((steps, envs_)) < 0.25
    terminated = done & (rng.random((steps, envs_)) < 0.5)
    truncated = done & ~terminated
    return (rng.normal(size=(steps, envs_)).astype(np.float32), rng.normal(size=(steps, envs_)).astype(np.float32),
            terminated, truncated, np.where(truncated, rng.normal(size=(steps, envs_)), 0.0).astype(np.float32),
            rng.normal(size=envs_).astype(np.float32))


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.9, 1.0])
def test_q_lambda_returns_match_the_forward_view_in_numpy(lam):
    rollout = _random_rollout(seed=int(lam * 10))
    assert rollout[2].any() and rollout[3].any()  # both kinds of episode end occur
    np.testing.assert_allclose(_returns(*rollout, 0.95, lam), _forward_view(*rollout, 0.95, lam), rtol=1e-5,
                               atol=1e-5)


def test_q_lambda_returns_match_rlax():
    rlax = pytest.importorskip("rlax", reason="rlax is not installed in this venv (not a dependency of rlpar); the "
                                              "numpy forward-view test above is the independent reference")
    reward, q_max, terminated, _, _, last = _random_rollout(seed=3)
    no_truncation = np.zeros_like(terminated)
    ours = _returns(reward, q_max, terminated, no_truncation, np.zeros_like(reward), last, 0.9, 0.7)
    next_value = np.concatenate([q_max[1:], last[None]])
    for b in range(reward.shape[1]):  # rlax: one env's [T] sequence; discount 0 where the episode terminated
        theirs = rlax.lambda_returns(reward[:, b], 0.9 * (1.0 - terminated[:, b]), next_value[:, b], 0.7)
        np.testing.assert_allclose(ours[:, b], np.asarray(theirs), rtol=1e-5, atol=1e-5)


def test_td_loss_by_hand():
    # 0.5 * mean((1 - 0)^2, (2 - 4)^2) = 0.5 * (1 + 4) / 2 = 1.25
    assert float(td_loss(jnp.array([1.0, 2.0]), jnp.array([0.0, 4.0]))) == pytest.approx(1.25)


def test_epsilon_schedule_by_hand():
    # from 1.0 to 0.1 over half of 100 updates: 1 - 0.9 * u / 50 until update 50, then 0.1
    eps = [float(epsilon_schedule(jnp.int32(u), 100, 1.0, 0.1, 0.5)) for u in (0, 25, 50, 80)]
    np.testing.assert_allclose(eps, [1.0, 0.55, 0.1, 0.1], rtol=1e-6)
    assert float(epsilon_schedule(jnp.int32(0), 100, 1.0, 0.1, 0.0)) == pytest.approx(0.1)  # no decay: finish


def test_epsilon_greedy_frequencies():
    q = jnp.tile(jnp.array([[0.0, 3.0, 1.0, 2.0]]), (20_000, 1))  # greedy action 1 in every row
    key = jax.random.PRNGKey(0)
    np.testing.assert_array_equal(epsilon_greedy(q, 0.0, key), 1)
    uniform = np.bincount(np.asarray(epsilon_greedy(q, 1.0, key)), minlength=4) / 20_000
    np.testing.assert_allclose(uniform, 0.25, atol=0.02)
    # epsilon 0.5: the greedy action 0.5 + 0.5 / 4 = 0.625 of the time, each other one 0.125
    half = np.bincount(np.asarray(epsilon_greedy(q, 0.5, key)), minlength=4) / 20_000
    np.testing.assert_allclose(half, [0.125, 0.625, 0.125, 0.125], atol=0.02)


# ---------------------------------------------------------------------------------------------------- the config


@pytest.mark.parametrize("change, message", [
    (dict(epsilon_start=1.5), "epsilon_start=1.5: must be in [0, 1]"),
    (dict(epsilon_finish=-0.1), "epsilon_finish=-0.1: must be in [0, 1]"),
    (dict(epsilon_decay=2.0), "epsilon_decay=2.0: must be in [0, 1]"),
    (dict(q_lambda=1.2), "q_lambda=1.2: must be in [0, 1]"),
    (dict(gamma=-1.0), "gamma=-1.0: must be in [0, 1]"),
    (dict(num_minibatches=3), "num_minibatches=3 does not divide the per-device batch"),
    (dict(update_epochs=0), "update_epochs=0: must be a positive integer"),
    (dict(lr=0.0), "lr=0.0: must be > 0"),
    (dict(hidden_sizes=()), "hidden_sizes=(): must be one or more positive integers"),
    (dict(activation="swish"), "activation='swish': must be one of"),
])
def test_bad_config_names_the_field_and_what_is_accepted(change, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        PQNConfig(**change).validate(num_devices=2)


def test_registered_with_presets_and_sweepable_traced_fields_only():
    from rlpar.agent import sweepable_fields

    assert registry.get("pqn") is pqn.SPEC
    assert sweepable_fields(PQNConfig) == ("lr", "max_grad_norm", "gamma", "q_lambda", "epsilon_start",
                                           "epsilon_finish", "epsilon_decay")
    assert PQNConfig.for_env("CartPole-v1") == PQNConfig()
    for env_id in ("CartPole-v1", "Breakout-MinAtar"):
        PQNConfig.for_env(env_id).validate(1)


def test_minatar_observations_go_through_the_cnn_torso():
    config = PQNConfig.for_env("Breakout-MinAtar")
    env, env_params = envs.make("Breakout-MinAtar")
    agent = make_pqn(config, env, env_params, 2)
    state = jax.eval_shape(agent.init, jax.random.PRNGKey(0), jax.random.PRNGKey(1))  # shapes only: no compile
    params = state.params["params"]
    assert params["Conv3x3_0"]["kernel"].shape == (3, 3, 4, 16) and "LayerNorm_0" in params
    q = jax.eval_shape(agent.network.apply, state.params, jax.ShapeDtypeStruct((2, 10, 10, 4), jnp.bool_))
    assert q.shape == (2, 3)  # Breakout: 3 actions


def test_policy_export_is_greedy_when_deterministic():
    env, env_params = envs.make("Probe-Policy-v0")  # 2 actions
    agent = make_pqn(PQNConfig(hidden_sizes=(8,)), env, env_params, 64)
    state = agent.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
    obs = jax.random.normal(jax.random.PRNGKey(2), (64, 1))
    greedy = np.argmax(np.asarray(agent.network.apply(state.params, obs)), axis=-1)
    actions, carry = agent.policy(state, True)((), obs, None)  # greedy needs no key
    np.testing.assert_array_equal(actions, greedy)
    assert 0 < greedy.mean() < 1  # both actions occur, so the comparison means something
    explore, _ = agent.policy(state, False)((), obs, jax.random.PRNGKey(3))  # epsilon_finish = 0.05: mostly greedy
    assert 0.8 < np.mean(np.asarray(explore) == greedy) <= 1.0


def test_continuous_actions_are_one_line_error_before_anything_compiles(monkeypatch, capsys):
    compiled = []
    monkeypatch.setattr(parallel, "compile_step", lambda *a, **k: compiled.append(1))
    assert train_cli.main(["pqn", "--env", "Pendulum-v1", "--devices", "2"]) == 2
    out, err = capsys.readouterr()
    assert "compiling" not in out and "Traceback" not in out + err
    assert err.strip() == ("error: pqn needs a discrete action space (Discrete(n)), but Pendulum-v1 has "
                           "Box(low=-2, high=2, shape=(1,)) (continuous actions); agents for it: ppo, sac")
    assert not compiled
    assert discrete_actions("pqn", *envs.make("Breakout-MinAtar")) == 3


# ---------------------------------------------------------------------------------------------------- devices

# A tiny finished run on 4 devices (6 updates, checkpoints every 2), through the CLI; shared by the tests below.
TINY_ARGV = [
    "pqn", "--env", "CartPole-v1", "--devices", "4", "--num-envs", "8", "--num-steps", "8",
    "--total-timesteps", str(8 * 8 * 6), "--num-minibatches", "2", "--update-epochs", "2", "--hidden-sizes", "16,16",
    "--log-every", "1", "--checkpoint-every", "2",
]


@pytest.fixture(scope="module")
def tiny_pqn_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("pqn") / "run"
    assert train_cli.main([*TINY_ARGV, "--run-dir", str(run_dir)]) == 0
    return run_dir


def _state(run_dir: Path, step: int | None = None):
    checkpoints = Checkpoints(run_dir / rundir.CHECKPOINTS)
    return checkpoints.restore(step if step is not None else checkpoints.latest()).state


def test_parameters_and_optimizer_state_bit_identical_on_four_devices(tiny_pqn_run):
    state = _state(tiny_pqn_run)
    agent = state["agent"]
    for leaf in jax.tree.leaves([agent["params"], agent["opt_state"], agent["updates"]]):
        assert leaf.shape[0] == 4
        for device in range(1, 4):
            np.testing.assert_array_equal(leaf[0], leaf[device])
    np.testing.assert_array_equal(agent["updates"], 6)
    assert not np.array_equal(state["rollout"]["obs"][0], state["rollout"]["obs"][1])  # each device its own envs
    before = _state(tiny_pqn_run, 4)["agent"]["params"]  # and the updates do move the parameters
    assert max(float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(agent["params"]))
               ) > 1e-4
    records = [json.loads(line) for line in (tiny_pqn_run / rundir.METRICS).read_text().splitlines()]
    assert len(records) == 6 and all(np.isfinite(r["loss/total"]) for r in records)
    assert records[0]["explore/epsilon"] == 1.0 and records[-1]["explore/epsilon"] == pytest.approx(0.05)


def test_pmean_gradient_equals_one_devices_gradient_on_the_concatenated_batch():
    env, env_params = envs.make("CartPole-v1")
    config = PQNConfig(hidden_sizes=(32, 32))
    single = make_pqn(config, env, env_params, 4, axis_name=None)
    params = single.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1)).params
    keys = jax.random.split(jax.random.PRNGKey(2), 3)
    batch = Batch(jax.random.normal(keys[0], (64, 4)), jax.random.randint(keys[1], (64,), 0, 2),
                  jax.random.normal(keys[2], (64,)) * 3)
    grads_one, stats_one = jax.jit(single.grad)(params, batch)
    grad_fn = lambda p, b: make_pqn(config, env, env_params, 1, parallel.AXIS_NAME).grad(p, b)
    mapped = jax.pmap(grad_fn, axis_name=parallel.AXIS_NAME, in_axes=(None, 0), out_axes=None,
                      devices=hosts.select_devices(4))
    grads_many, stats_many = mapped(params, jax.tree.map(lambda x: x.reshape((4, 16) + x.shape[1:]), batch))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5), grads_one, grads_many)
    np.testing.assert_allclose(stats_one["loss/total"], stats_many["loss/total"], rtol=1e-5)
    assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads_one)) > 1e-3  # not trivially zero


def test_plain_and_fast_paths_give_the_same_update():
    env, env_params = envs.make("CartPole-v1")
    config = PQNConfig(hidden_sizes=(16,), update_epochs=1, num_minibatches=2)
    keys = jax.random.split(jax.random.PRNGKey(3), 4)
    batch = Batch(jax.random.normal(keys[0], (32, 4)), jax.random.randint(keys[1], (32,), 0, 2),
                  jax.random.normal(keys[2], (32,)))
    results = []
    for fast in (True, False):
        with platform.fast_paths(fast), shuffle.using("feistel"):  # the same permutations on both
            agent = make_pqn(config, env, env_params, 4)
            state = agent.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
            results.append(jax.jit(agent.fit)(state.params, state.opt_state, batch, keys[3])[:2])
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5), *results)


@pytest.mark.slow  # a subprocess compiling and training twice; CI runs it (-m slow)
def test_sigkill_between_checkpoints_then_resume_is_bit_identical(tiny_pqn_run, tmp_path):
    run_dir = tmp_path / "killed"
    proc = subprocess.run(
        [sys.executable, str(SIGKILL_AFTER), "3", *TINY_ARGV, "--run-dir", str(run_dir)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert Checkpoints(run_dir / rundir.CHECKPOINTS).committed_steps() == [2]  # killed after update 3's line

    assert train_cli.main(["--resume", str(run_dir)]) == 0

    assert (run_dir / rundir.METRICS).read_bytes() == (tiny_pqn_run / rundir.METRICS).read_bytes()
    resumed, uninterrupted = _state(run_dir), _state(tiny_pqn_run)
    assert jax.tree.structure(resumed) == jax.tree.structure(uninterrupted)
    jax.tree.map(np.testing.assert_array_equal, resumed, uninterrupted)  # params, optimizer, envs, keys, counters


def test_evaluate_runs_the_greedy_policy_of_a_pqn_run(tiny_pqn_run, capsys):
    result = evaluate.evaluate(tiny_pqn_run, episodes=3)
    assert result.returns.shape == (3,) and np.all((result.returns >= 1) & (result.returns <= 500))
    assert evaluate.main([str(tiny_pqn_run), "--episodes", "3"]) == 0
    assert "greedy policy, 3 episodes" in capsys.readouterr().out


def test_seeds_and_a_hyperparameter_sweep_in_one_compile_under_shard_map(monkeypatch):
    # 2 seeds x lr in {1e-9, 1e-3}, no annealing: 4 slots (seed 0, seed 1 at each lr) in one compiled program, on
    # the shard_map backend (the other tests run pmap), whose check_vma proves every metric is reduced over devices.
    compiles = []
    compile_step = parallel.compile_step
    monkeypatch.setattr(parallel, "compile_step", lambda *a, **k: compiles.append(1) or compile_step(*a, **k))
    config = PQNConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 4, num_minibatches=2, update_epochs=1,
                       hidden_sizes=(16,), anneal_lr=False)
    run_config = RunConfig(devices=2, num_seeds=2, sweep="lr=1e-9,1e-3", log_every=4, backend="shard_map")
    result = run(pqn.SPEC, config, run_config)
    assert len(compiles) == 1 and len(result.metrics[-1]["slots"]) == 4
    # Slots 0 and 1 (lr 1e-9) are their seeds' initial parameters to within ~1e-8, so slot 2 - slot 0 is how far
    # lr 1e-3 moved seed 0's parameters, and slot 1 - slot 0 how far apart the seeds started.
    leaves = jax.tree.leaves(result.params)
    gap = lambda i, j: max(float(np.abs(x[i] - x[j]).max()) for x in leaves)
    assert gap(2, 0) > 1e-4 and gap(3, 1) > 1e-4  # the swept lr reached the update
    assert gap(1, 0) > 1e-2 and gap(3, 2) > 1e-2  # different seeds, different parameters
    copies = parallel.replicas(result.state.agent.params)  # and, slot by slot, the same on both devices
    jax.tree.map(np.testing.assert_array_equal, copies[0], copies[1])


# ---------------------------------------------------------------------------------------------------- probes

PROBE = PQNConfig(num_envs=8, num_steps=16, total_timesteps=8 * 16 * 100, lr=1e-2, anneal_lr=True,
                  update_epochs=4, num_minibatches=4, hidden_sizes=(16,), gamma=0.9)


def _q_values(env_id: str, config: PQNConfig, obs) -> np.ndarray:
    result = pqn.train(config, env_id, devices=2, log_every=config.num_updates)
    agent = make_pqn(config, *envs.make(env_id), 1)
    return np.asarray(agent.network.apply(result.params, jnp.asarray(obs, jnp.float32)))


def test_probe_one_step_reward_has_q_one():
    assert _q_values("Probe-OneStep-v0", PROBE, [[0.0]])[0, 0] == pytest.approx(1.0, abs=0.05)


def test_probe_two_step_chain_bootstraps_across_the_step():
    # reward 0.5, then 1, then termination; gamma 0.9: Q(s0) = 0.5 + 0.9 * 1 = 1.4, Q(s1) = 1
    q = _q_values("Probe-TwoStep-v0", PROBE, [[0.0], [1.0]])[:, 0]
    np.testing.assert_allclose(q, [1.4, 1.0], atol=0.1)


def test_probe_time_limit_needs_the_truncation_bootstrap():
    # Reward 1 forever, cut at 5 steps by a time limit, constant observation; gamma 0.9. Bootstrapping truncated
    # steps from Q(final observation) gives Q = 1 / (1 - 0.9) = 10; treating the limit as termination would fit the
    # mean truncated return, about (4.10 + 3.44 + 2.71 + 1.9 + 1) / 5 = 2.6.
    config = PROBE.replace(total_timesteps=8 * 16 * 200, anneal_lr=False)
    assert _q_values("Probe-Truncated-v0", config, [[0.0]])[0, 0] == pytest.approx(10.0, abs=0.5)


# ---------------------------------------------------------------------------------------------------- learning


@pytest.mark.slow
@pytest.mark.full_optimization  # a learning run: compiled as a user's, its run long enough to pay
def test_cartpole_is_solved_with_defaults(tmp_path):
    # In a fresh process, as a user runs it (see test_train.py's test of the same name for why).
    code = ("import sys, agents.pqn as pqn\nfrom rlpar.tools import evaluate\n"
            "pqn.train(None, 'CartPole-v1', devices=1, run_dir=sys.argv[1])\n"
            "print(evaluate.evaluate(sys.argv[1], episodes=20).mean)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], cwd=REPO, capture_output=True,
                          text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.split()[-1]) >= 475  # greedy, 20 episodes; a random policy scores about 22
