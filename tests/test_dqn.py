"""DQN: the double-Q math by hand, devices that stay identical, the pmean-ed gradient, probes with known Q-values,
seeds and a swept learning rate in one compile, kill and resume with the replay buffer, evaluation, one-line errors,
and CartPole solved with the defaults (slow)."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import final_state, resume_and_compare

import agents
import envs
from agents.dqn import DQNConfig, double_q_targets, linear_schedule, make_dqn, td_loss
from agents.replay import ReplayItem
from rlpar.core import hosts, parallel
from rlpar.tools import evaluate
from rlpar.tools import train as train_cli

REPO = Path(__file__).resolve().parents[1]

# 4 devices x 2 envs, 6 updates of 4 steps; learning from the first update, 2 gradient steps per update (12 in all),
# the target copied every 5 gradient steps; 2 seeds x 2 learning rates = 4 slots in one compiled program (log_every
# divides the updates: one chunk length).
TINY_ARGV = [
    "dqn", "--env", "CartPole-v1", "--devices", "4", "--num-envs", "8", "--num-steps", "4",
    "--total-timesteps", str(8 * 4 * 6), "--buffer-size", "128", "--minibatch-size", "16", "--learning-starts", "32",
    "--gradient-steps", "2", "--target-update-every", "5", "--hidden-sizes", "16,16", "--num-seeds", "2",
    "--sweep", "lr=1e-9,3e-3", "--log-every", "2", "--checkpoint-every", "2",
]


# killed_run and tiny_run (conftest): this module's TINY_ARGV, SIGKILLed after update 4 and run whole.


# ---- the math, by hand ----

def test_double_q_targets_by_hand():
    reward, terminated = jnp.array([1.0, 2.0]), jnp.array([False, True])
    online = jnp.array([[3.0, 1.0], [0.0, 9.0]])  # picks action 0 in the first row
    target = jnp.array([[10.0, 20.0], [5.0, 5.0]])
    # double: 1 + 0.5 * target[0, 0] = 6; plain: 1 + 0.5 * max(10, 20) = 11; a terminated step is its reward alone.
    np.testing.assert_allclose(double_q_targets(reward, terminated, online, target, 0.5), [6.0, 2.0])
    np.testing.assert_allclose(double_q_targets(reward, terminated, online, target, 0.5, double=False), [11.0, 2.0])


def test_td_loss_and_epsilon_schedule_by_hand():
    loss, q_taken = td_loss(jnp.array([[1.0, 2.0], [3.0, 4.0]]), jnp.array([1, 0]), jnp.array([0.0, 0.0]))
    np.testing.assert_allclose(q_taken, [2.0, 3.0])
    assert float(loss) == pytest.approx(0.5 * (4.0 + 9.0) / 2)  # 3.25
    values = [float(linear_schedule(s, 1.0, 0.1, 100)) for s in (0, 50, 100, 200)]
    np.testing.assert_allclose(values, [1.0, 0.55, 0.1, 0.1], rtol=1e-6)
    assert float(linear_schedule(0, 1.0, 0.1, 0)) == pytest.approx(0.1)  # no decay: the end value from the start


# ---- devices ----

def test_parameters_target_and_optimizer_state_are_bit_identical_on_every_device(tiny_run):
    agent = final_state(tiny_run)["agent"]
    for name in ("params", "target_params", "opt_state", "updates", "steps"):
        rows = jax.tree.leaves(agent[name])
        for leaf in rows:
            assert leaf.shape[:2] == (4, 4)  # [devices, slots]
            for device in range(1, 4):
                np.testing.assert_array_equal(leaf[0], leaf[device], err_msg=name)
    assert int(agent["steps"][0, 0]) == 12  # 6 updates x 2 gradient steps
    # Each device keeps its own environments' transitions: the buffers differ (per-device capacity 128 / 4 = 32).
    stored = agent["buffer"]["experience"]["obs"]
    assert stored.shape[:4] == (4, 4, 1, 32) and not np.array_equal(stored[0], stored[1])


def test_seeds_and_swept_learning_rate_in_one_program(tiny_run):
    # slots: (seed 0, lr 1e-9), (seed 1, lr 1e-9), (seed 0, lr 3e-3), (seed 1, lr 3e-3). The target network was
    # copied after gradient step 10 (a multiple of 5), so it differs from the online network only where that moved
    # in steps 11 and 12: not at lr 1e-9.
    agent = final_state(tiny_run)["agent"]
    online, target = jax.tree.leaves(agent["params"]), jax.tree.leaves(agent["target_params"])
    assert not np.array_equal(online[0][0, 0], online[0][0, 1])  # two seeds, two initialisations
    moved = [max(float(np.abs(a[0, slot] - b[0, slot]).max()) for a, b in zip(online, target)) for slot in range(4)]
    assert max(moved[:2]) < 1e-6 < 1e-4 < min(moved[2:])


def test_pmean_gradient_equals_one_devices_gradient_on_the_concatenated_batch():
    env, env_params = envs.make("CartPole-v1")
    config = DQNConfig(hidden_sizes=(16, 16))
    single = make_dqn(config, env, env_params, 4, None)
    params = jax.jit(single.init)(jax.random.PRNGKey(0), jax.random.PRNGKey(1)).params
    target = jax.tree.map(lambda x: x + 0.1, params)  # another network, so the double-Q choice matters
    k = jax.random.split(jax.random.PRNGKey(2), 5)
    batch = ReplayItem(jax.random.normal(k[0], (64, 4)), jax.random.randint(k[1], (64,), 0, 2),
                       jax.random.normal(k[2], (64,)), jax.random.normal(k[3], (64, 4)),
                       jax.random.bernoulli(k[4], 0.2, (64,)))
    many = make_dqn(config, env, env_params, 1, parallel.AXIS_NAME)

    def both(p, t, full, shard):  # one program: the 4 devices' pmean-ed gradient and one device's on all 64
        return many.grad(p, t, shard)[0], single.grad(p, t, full)[0]

    mapped = jax.pmap(both, axis_name=parallel.AXIS_NAME, in_axes=(None, None, None, 0), out_axes=None,
                      devices=hosts.select_devices(4))
    grads_many, grads_one = mapped(params, target, batch,
                                   jax.tree.map(lambda x: x.reshape((4, 16) + x.shape[1:]), batch))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5), grads_one, grads_many)
    assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads_one)) > 1e-3


# ---- probes with known answers ----

PROBE = DQNConfig(num_envs=8, num_steps=8, total_timesteps=8 * 8 * 160, buffer_size=1024, minibatch_size=64,
                  learning_starts=64, gradient_steps=8, target_update_every=4, lr=3e-2, anneal_lr=False, gamma=0.9,
                  hidden_sizes=(16,))


def _q_values(env_id, obs, config=PROBE):
    result = agents.dqn.train(config, env_id, devices=2, log_every=config.num_updates)
    network = make_dqn(config, *envs.make(env_id), 1, None).network
    return np.asarray(network.apply(result.params, jnp.asarray(obs, jnp.float32)))


def test_two_step_chain_bootstraps_once_and_a_terminal_step_not_at_all():
    # Probe-TwoStep-v0: reward 0.5 at [0], then reward 1 at [1] and the episode terminates. gamma = 0.9:
    # Q([1]) = 1 (a one-step reward of 1, no future), Q([0]) = 0.5 + 0.9 * 1 = 1.4.
    q = _q_values("Probe-TwoStep-v0", [[0.0], [1.0]])
    np.testing.assert_allclose(q[:, 0], [1.4, 1.0], atol=0.05)


def test_time_limit_bootstraps_from_the_final_observation():
    # Probe-Truncated-v0: reward 1 forever, cut after 5 steps, constant observation. With the final observation as
    # the truncated step's next one: Q = 1 / (1 - 0.9) = 10. Reading the cut as termination would give
    # Q = 1 / (1 - 0.8 * 0.9) = 3.6 (4 of 5 steps bootstrap).
    q = _q_values("Probe-Truncated-v0", [[0.0]])
    assert q[0, 0] == pytest.approx(10.0, abs=0.3)


# ---- a run dir: kill and resume, evaluate ----

@pytest.mark.slow  # a subprocess compiling and training twice; CI runs it (-m slow)
def test_sigkill_then_resume_is_bit_identical_replay_buffer_included(tiny_run, killed_run):
    resumed = resume_and_compare(*killed_run, tiny_run, killed_before=[2])  # killed before update 4's save
    assert int(np.asarray(resumed["agent"]["buffer"]["current_index"]).max()) > 0


def test_evaluate_runs_the_greedy_export(tiny_run):
    result = evaluate.evaluate(tiny_run, episodes=3, slot=3)
    assert result.returns.shape == (3,) and np.all((result.returns >= 1) & (result.returns <= 500))
    np.testing.assert_array_equal(result.returns, result.lengths)  # CartPole pays 1 per step


# ---- one-line errors before anything compiles ----

@pytest.mark.parametrize("argv, message", [
    (["--env", "Pendulum-v1"], "dqn needs a discrete action space (Discrete(n)), but Pendulum-v1 has "
                               "Box(low=-2, high=2, shape=(1,)) (continuous actions); agents for it: ppo, sac"),
    (["--buffer-size", "32", "--minibatch-size", "64"], "buffer_size=32 is smaller than minibatch_size=64"),
    (["--minibatch-size", "6", "--devices", "4"], "minibatch_size=6 is not divisible by the device count 4"),
    (["--epsilon-end", "1.5"], "epsilon_end=1.5: must be in [0, 1]"),
    (["--exploration-fraction", "-0.1"], "exploration_fraction=-0.1: must be in [0, 1]"),
    (["--tau", "0"], "tau=0.0: must be in (0, 1]"),
    (["--learning-starts", "10000000"], "learning_starts=10000000: must be an integer in [0, 102400)"),
    (["--sweep", "hidden_sizes=8,16"], "with FIELD one of tau, lr, max_grad_norm, gamma, epsilon_start"),
])
def test_bad_input_is_one_line_before_compiling(argv, message, capsys):
    assert train_cli.main(["dqn", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "compil" not in captured.out


# ---- learning (slow) ----

@pytest.mark.slow
@pytest.mark.full_optimization  # a learning run: compiled as a user's, its run long enough to pay
def test_cartpole_is_solved_with_defaults(tmp_path):
    # Trained as a user runs it, in a fresh process; then 20 greedy episodes (measured: 500 +- 0, README "DQN").
    run_dir = tmp_path / "cartpole"
    proc = subprocess.run([sys.executable, "-m", "rlpar.train", "dqn", "--env", "CartPole-v1", "--devices", "1",
                           "--run-dir", str(run_dir), "--no-compile-cache"], cwd=REPO, capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert evaluate.evaluate(run_dir, episodes=20).mean >= 475
