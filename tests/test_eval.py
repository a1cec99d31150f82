"""Greedy evaluation during training, and the one compiled program a run uses (4 fake CPU devices, tiny configs)."""

import json
import threading

import jax
import numpy as np
import pytest

import agents
import envs
from agents.ppo import PPOConfig
from rlpar.core import episodes, parallel, platform, program
from rlpar.run import rundir
from rlpar.run.runner import Hooks, RunConfig, run
from rlpar.tools import plot
from rlpar.tools import train as train_cli

# 5 updates in chunks of 2, 2 and 1: the last chunk is shorter than log_every.
TINY = PPOConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 5, num_minibatches=2, update_epochs=1,
                 hidden_sizes=(16,))
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # one per XLA compilation (jax/_src/dispatch.py)


def _without(records, prefix=("eval/",), fields=("time_s", "sps", "startup_s")):
    return [{k: v for k, v in r.items() if not k.startswith(prefix) and k not in fields} for r in records]


def _rows(state):
    return parallel.rows_to_host(state)


class _Compiles:
    """XLA compilations counted from the runner's ``compiling`` status on."""

    def __init__(self):
        self.count, self.counting, self.status, self.threads = 0, False, [], []

    def on_event(self, event, duration, **kwargs):
        # The init compiles in a thread of its own beside the chunk program (rlpar.run.build): not counted here.
        thread = threading.current_thread().name
        if event == COMPILE_EVENT and self.counting and not thread.startswith("rlpar-init"):
            self.count += 1
            self.threads.append(thread.split("_")[0])  # an executor's thread: "<prefix>_<n>"

    def on_status(self, event, info):
        if event != "still compiling":  # a compile longer than a few seconds says so once a second
            self.status.append(event)
        self.counting = self.counting or event == "compiling"


@pytest.fixture(scope="module")
def eval_runs():
    """The same training with evaluation off and on (every 2 updates, 8 episodes), compilations counted for the
    latter."""
    off = run(agents.ppo.SPEC, TINY, RunConfig(devices=2, log_every=2, eval_every=0))
    compiles = _Compiles()
    jax.monitoring.register_event_duration_secs_listener(compiles.on_event)
    try:
        on = run(agents.ppo.SPEC, TINY, RunConfig(devices=2, log_every=2, eval_every=2, eval_episodes=8),
                 hooks=Hooks(on_status=compiles.on_status))
    finally:
        jax.monitoring.unregister_event_duration_listener(compiles.on_event)
    return off, on, compiles


def test_evaluation_leaves_training_bit_identical(eval_runs):
    off, on, _ = eval_runs
    assert _without(on.metrics) == _without(off.metrics)
    assert not any(k.startswith("eval/") for r in off.metrics for k in r)
    # The whole final training state: parameters, optimizer, every device's environments, observations and keys.
    jax.tree.map(np.testing.assert_array_equal, _rows(on.state), _rows(off.state))


def test_evaluation_runs_after_each_multiple_of_eval_every_and_at_the_end(eval_runs):
    _, on, _ = eval_runs
    assert [r["update"] for r in on.metrics] == [2, 4, 5]
    for record in on.metrics:  # CartPole pays 1 per step: return = length, within 1..500
        assert 1 <= record["eval/episode_return_min"] <= record["eval/episode_return"] <= record[
            "eval/episode_return_max"] <= 500
        assert record["eval/episode_length"] == record["eval/episode_return"]
        assert record["eval/episode_return_std"] >= 0


def test_a_run_compiles_one_program_whatever_its_chunk_lengths(eval_runs):
    # Chunks of 2, 2 and 1 updates, evaluating after some of them: one XLA compilation from "compiling" to the end
    # (none while training).
    _, _, compiles = eval_runs
    assert compiles.status == ["compiling", "compiled"]
    assert compiles.count == 1


def test_evaluation_as_a_program_of_its_own_matches_the_branch(eval_runs):
    # The accelerators' answer (rlpar.core.platform.evaluation_in_chunk): the chunk program without the evaluation
    # branch, the evaluation compiled as a second program and called after the chunks that evaluate. Same records
    # (the same episodes: the key depends only on the update), same final state, two compilations.
    _, on, _ = eval_runs
    compiles = _Compiles()
    jax.monitoring.register_event_duration_secs_listener(compiles.on_event)
    try:
        with platform.forcing(evaluation_in_chunk=False):
            separate = run(agents.ppo.SPEC, TINY, RunConfig(devices=2, log_every=2, eval_every=2, eval_episodes=8),
                           hooks=Hooks(on_status=compiles.on_status))
    finally:
        jax.monitoring.unregister_event_duration_listener(compiles.on_event)
    assert compiles.status == ["compiling", "compiled"] and compiles.count == 2
    # the chunk's XLA compile in a thread the calling thread waits for (rlpar.run.compiling), the evaluation in a
    # thread beside it (both before "compiled")
    assert sorted(compiles.threads) == ["rlpar-chunk", "rlpar-evaluation"], compiles.threads
    assert _without(separate.metrics, prefix=()) == _without(on.metrics, prefix=())
    assert [r["update"] for r in separate.metrics if "eval/episode_return" in r] == [2, 4, 5]
    jax.tree.map(np.testing.assert_array_equal, _rows(separate.state), _rows(on.state))


def test_a_chunk_program_without_donation_trains_bit_identically(eval_runs):
    # The accelerators' answer for a small state (rlpar.core.platform.donate_state): the state is not donated, so a
    # chunk holds the state it was given beside the one it returns. Nothing else changes.
    off, _, _ = eval_runs
    with platform.forcing(donate_state=False):
        kept = run(agents.ppo.SPEC, TINY, RunConfig(devices=2, log_every=2, eval_every=0))
    assert _without(kept.metrics, prefix=()) == _without(off.metrics, prefix=())
    jax.tree.map(np.testing.assert_array_equal, _rows(kept.state), _rows(off.state))


def test_the_runners_chunk_program_donates_its_state_as_the_platform_decides():
    # The choice reaches the compiled program: every leaf of the state aliased to an output (donated: XLA:CPU's
    # answer) or none (the accelerators' for a small state). Read from the compiled HLO's input_output_alias: the
    # args_info of the pmap backend's program marks only the first leaf donated (JAX 0.10.2) though XLA aliases all.
    from rlpar.run import build, chunks, prepare

    run_config = RunConfig(devices=2, log_every=2, eval_every=0, compile_cache="off")
    prepared = prepare.prepare_run(agents.ppo.SPEC, TINY, run_config, None, None)
    state = build.initial_state(prepared, TINY, run_config, None)
    schedule = chunks.Schedule([2, 2, 1], 0, 0, TINY.seed)
    for donate in (None, False):
        with platform.forcing(donate_state=donate):
            programs, _ = chunks.compile_programs(prepared, run_config, lambda: state, schedule, 2, Hooks())
        header = programs.chunk.as_text().split("\n", 1)[0]
        assert header.count("-alias)") == (len(jax.tree.leaves(state)) if donate is None else 0)


def test_the_donation_choice_reads_one_devices_rows_of_the_state():
    from rlpar.run import chunks

    state = {"w": jax.ShapeDtypeStruct((4, 256, 256), np.float32), "n": jax.ShapeDtypeStruct((4, 3), np.int32)}
    assert chunks.bytes_per_device(state, 4) == 256 * 256 * 4 + 3 * 4


def test_eval_interval_default_is_about_ten_per_run_and_zero_is_off():
    assert RunConfig().eval_interval(976) == 98
    assert RunConfig().eval_interval(5) == 1
    assert RunConfig(eval_every=7).eval_interval(976) == 7
    assert RunConfig(eval_every=0).eval_interval(976) == 0


def _a2c():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/ is not installed
    from examples.a2c import SPEC, A2CConfig

    return SPEC, A2CConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2, hidden_sizes=(8,))


@pytest.mark.parametrize("agent, env_id, backend, known, inside", [
    # Probe-Truncated-v0 pays 1 per step and is cut after 5 steps: every episode returns 5 in 5 steps, whatever
    # the policy. An episode counted past its end, or cut before it, shows here.
    ("ppo", "Probe-Truncated-v0", "pmap", (5.0, 5.0, 5.0), True),
    ("ppo", "Probe-Truncated-v0", "shard_map", (5.0, 5.0, 5.0), True),
    # The same with the evaluation a program of its own (the accelerators' answer), under the stricter backend.
    ("ppo", "Probe-Truncated-v0", "shard_map", (5.0, 5.0, 5.0), False),
    # Probe-Memory-v0 ends after 3 steps, paying 0 or 1: the GRU's carry goes through the policy export.
    ("ppo_rnn", "Probe-Memory-v0", "shard_map", (3.0, 0.0, 1.0), True),
    # Probe-OneStep-v0: reward 1, then the end; a user's agent (examples/a2c.py).
    ("a2c", "Probe-OneStep-v0", "pmap", (1.0, 1.0, 1.0), True),
])
def test_every_agent_evaluates_through_its_policy_export_with_known_probe_answers(agent, env_id, backend, known,
                                                                                 inside):
    if agent == "a2c":
        spec, config = _a2c()
    elif agent == "ppo_rnn":
        spec = agents.ppo_rnn.SPEC
        config = agents.ppo_rnn.RecurrentPPOConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2,
                                                   num_minibatches=1, gru_size=8, hidden_sizes=(8,))
    else:
        spec, config = agents.ppo.SPEC, agents.PPOConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2,
                                                         num_minibatches=1, hidden_sizes=(8,))
    with platform.forcing(evaluation_in_chunk=inside):
        result = run(spec, config, RunConfig(env=env_id, devices=4, log_every=2, eval_every=1, eval_episodes=12,
                                             backend=backend))  # 12 episodes: 3 on each of 4 devices
    record = result.metrics[-1]
    length, low, high = known
    assert record["eval/episode_length"] == record["eval/episode_length_max"] == length
    assert record["eval/episode_length_std"] == 0.0
    assert low <= record["eval/episode_return_min"] <= record["eval/episode_return"] <= record[
        "eval/episode_return_max"] <= high
    if low == high:  # the return is known exactly
        assert record["eval/episode_return"] == low and record["eval/episode_return_std"] == 0.0


def test_episodes_end_at_the_step_cap_and_later_episodes_are_not_counted():
    # Probe-OneStep-v0 ends after one step: its later (auto-reset) episodes must not add up. Probe-Truncated-v0 cut
    # at 3 steps by the cap: return 3, not ended.
    cases = (("Probe-OneStep-v0", 4, (1.0, 1, True)), ("Probe-Truncated-v0", 3, (3.0, 3, False)))
    for env_id, steps, expected in cases:
        env, env_params = envs.make(env_id)
        run_episodes = episodes.make_episodes(env, env_params, lambda n: (), 3, steps)
        policy = lambda carry, obs, key: (np.zeros(obs.shape[0], np.int32), carry)
        result = jax.jit(lambda key: run_episodes(policy, key))(jax.random.PRNGKey(0))
        assert result.returns.tolist() == [expected[0]] * 3 and result.lengths.tolist() == [expected[1]] * 3
        assert result.ended.tolist() == [expected[2]] * 3
    assert episodes.max_steps(envs.make("Probe-Truncated-v0")[1]) == 5
    assert episodes.max_steps(object()) == episodes.STEP_CAP  # no max_steps_in_episode: the cap


def _host_evaluation(config, result, slot, seed_index, update, devices, per_device):
    """Slot ``slot``'s evaluation recomputed outside the runner: its own parameters, the documented keys."""
    env, env_params = envs.make("CartPole-v1")
    state = jax.tree.map(lambda x: x[slot], parallel.first_replica(result.state.agent))
    agent = agents.ppo.SPEC.make(config, env, env_params, config.num_envs // devices, None)
    run_episodes = episodes.make_episodes(env, env_params, agent.initial_carry, per_device,
                                          episodes.max_steps(env_params))
    key = jax.random.fold_in(jax.random.fold_in(program.eval_key(config.seed), update), seed_index)
    found = [run_episodes(agent.policy(state, True), jax.random.fold_in(key, d)) for d in range(devices)]
    return np.concatenate([np.asarray(f.returns) for f in found])


def test_each_slot_of_seeds_and_a_sweep_evaluates_its_own_policy():
    # 2 seeds x 2 entropy coefficients = 4 slots. Each slot's evaluation equals its own policy's episodes,
    # recomputed here from its parameters with the documented keys (slots of one seed share episodes' resets).
    config = TINY.replace(total_timesteps=4 * 8 * 3, lr=3e-2, anneal_lr=False)
    run_config = RunConfig(devices=2, log_every=3, num_seeds=2, sweep="ent_coef=0.0,0.5", eval_every=3,
                           eval_episodes=4)
    result = run(agents.ppo.SPEC, config, run_config)
    record = result.metrics[-1]
    assert len(record["slots"]) == 4
    for slot, (seed_index, ent_coef) in enumerate([(0, 0.0), (1, 0.0), (0, 0.5), (1, 0.5)]):
        returns = _host_evaluation(config.replace(ent_coef=ent_coef), result, slot, seed_index, 3, 2, 2)
        stats = record["slots"][slot]
        assert stats["eval/episode_return"] == pytest.approx(returns.mean())
        assert (stats["eval/episode_return_min"], stats["eval/episode_return_max"]) == (returns.min(), returns.max())
    pooled = np.mean([s["eval/episode_return"] for s in record["slots"]])  # every slot ran 4 episodes
    assert record["eval/episode_return"] == pytest.approx(pooled)


def test_eval_episodes_not_divisible_by_the_devices_is_a_one_line_error(capsys):
    with pytest.raises(ValueError, match=r"eval_episodes=6 is not divisible by the device count 4: use a multiple "
                                         r"of 4 \(e\.g\. 8\), or eval_every=0"):
        run(agents.ppo.SPEC, TINY, RunConfig(devices=4, eval_episodes=6))
    RunConfig(eval_episodes=6, eval_every=0).validate_devices(4)  # no evaluation: nothing to split
    assert train_cli.main(["ppo", "--devices", "4", "--eval-episodes", "6"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: eval_episodes=6 is not divisible by the device count 4") and err.count("\n") == 1
    assert train_cli.main(["ppo", "--eval-every", "-2"]) == 2
    assert "eval_every=-2: must be a positive integer, 0 (no evaluation) or -1" in capsys.readouterr().err


def test_cli_seeds_run_logs_and_prints_evaluations_and_plots_them(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = train_cli.main(["ppo", "--num-envs", "4", "--num-steps", "8", "--total-timesteps", "96",
                           "--num-minibatches", "2", "--hidden-sizes", "8", "--devices", "2", "--num-seeds", "2",
                           "--log-every", "1", "--eval-every", "2", "--eval-episodes", "4", "--tensorboard",
                           "--run-dir", str(run_dir)])
    assert code == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("update")]
    assert "eval seed=0: " in lines[1] and "eval" not in lines[0]  # updates 2 and 3 (the end) evaluate
    done = [line for line in out.splitlines() if line.startswith("done:")][0]
    assert "; greedy evaluation at update 3 (4 episodes): seed=0: " in done and "  seed=1: " in done
    records = [json.loads(line) for line in (run_dir / rundir.METRICS).read_text().splitlines()]
    assert [r["update"] for r in records if "eval/episode_return" in r] == [2, 3]
    assert all("eval/episode_length_max" in s for s in records[-1]["slots"])
    from test_logging import _events

    tags = {tag for tag, _, _ in _events(run_dir / rundir.TENSORBOARD)}
    assert {"eval/episode_return", "slot1/eval/episode_return", "eval/episode_length_std"} <= tags

    fig = plot.figure([str(run_dir)])
    try:
        dashed = [line for line in fig.axes[0].lines if line.get_linestyle() == "--"]
        assert len(dashed) == 1 and "greedy evaluation (mean ± 1 std of 2 seeds)" in dashed[0].get_label()
        evaluated = [r for r in records if "eval/episode_return" in r]
        expected = [np.mean([s["eval/episode_return"] for s in r["slots"]]) for r in evaluated]
        np.testing.assert_allclose(dashed[0].get_ydata(), expected)
        assert dashed[0].get_xdata().tolist() == [64, 96]
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
