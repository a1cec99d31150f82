"""Evaluating a run's final policy: known answers on probes, the CLI on a trained run, GIFs."""

import jax
import numpy as np

import agents
import envs
from agents.ppo import PPOConfig
from rlpar.tools import evaluate


def _greedy_returns(env_id: str, episodes: int, seed: int = 0):
    """Episodes of an untrained PPO policy (the returns of the probes below do not depend on the policy)."""
    env, env_params = envs.make(env_id)
    ppo = agents.ppo.make_ppo(PPOConfig(hidden_sizes=(8,)), env, env_params, episodes)
    state = ppo.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
    policy = evaluate.Policy(ppo.policy(state, True), ppo.initial_carry, env_id, update=0, slot=0)
    run = evaluate.make_episodes(policy, env, env_params, episodes, max_steps=10)
    returns, lengths, done, _ = run(jax.random.PRNGKey(seed))
    return np.asarray(returns), np.asarray(lengths), np.asarray(done)


def test_one_step_probe_scores_exactly_one_per_episode():
    # Probe-OneStep-v0: reward 1, then the episode terminates; later auto-reset episodes must not be counted.
    returns, lengths, done = _greedy_returns("Probe-OneStep-v0", episodes=3)
    assert returns.tolist() == [1.0, 1.0, 1.0] and lengths.tolist() == [1, 1, 1] and done.all()


def test_truncated_probe_counts_every_step_of_the_episode():
    # Probe-Truncated-v0: reward 1 per step, truncated after 5 steps -> return 5 and length 5.
    returns, lengths, _ = _greedy_returns("Probe-Truncated-v0", episodes=2)
    assert returns.tolist() == [5.0, 5.0] and lengths.tolist() == [5, 5]


def test_evaluate_cli_reports_mean_and_std_of_the_greedy_policy(tiny_run_dir, capsys):
    result = evaluate.evaluate(tiny_run_dir, episodes=4)
    assert result.returns.shape == (4,) and np.all((result.returns >= 1) & (result.returns <= 500))
    # CartPole pays 1 per step, so each return equals its episode length.
    np.testing.assert_array_equal(result.returns, result.lengths)
    # The CLI evaluates again with the same seed: the same episodes, so the same numbers.
    assert evaluate.main([str(tiny_run_dir), "--episodes", "4"]) == 0
    out = capsys.readouterr().out
    assert f"4 episodes: return {result.mean:.2f} +- {result.std:.2f}" in out


def test_gif_of_a_cartpole_episode(tiny_run_dir, tmp_path):
    from PIL import Image

    path = tmp_path / "episode.gif"
    drawn = []
    frames = evaluate.write_gif(tiny_run_dir, path, max_frames=3, on_frame=lambda i, n: drawn.append((i, n)))
    assert frames == 3 and drawn[-1] == (2, 3)  # progress reported frame by frame
    with Image.open(path) as image:
        assert image.format == "GIF" and image.n_frames == 3


def test_gif_of_an_env_the_visualizer_cannot_draw_is_a_clear_error(tmp_path, capsys):
    import json

    from rlpar.run import rundir
    from rlpar.run.rundir import FORMAT_VERSION as RUN_FORMAT_VERSION

    meta = {"format_version": RUN_FORMAT_VERSION, "agent": "ppo", "run": {"env": "Probe-OneStep-v0"}, "config": {}}
    (tmp_path / rundir.CONFIG).write_text(json.dumps(meta))
    try:
        evaluate.write_gif(tmp_path, tmp_path / "x.gif")
    except ValueError as err:
        assert "gymnax's visualizer cannot draw 'Probe-OneStep-v0'; it draws Acrobot-v1, CartPole-v1" in str(err)
    else:
        raise AssertionError("expected a ValueError")


def test_evaluate_of_a_run_dir_without_checkpoints_is_a_clear_error(tiny_run_dir, tmp_path, capsys):
    import shutil

    shutil.copy(tiny_run_dir / "config.json", tmp_path / "config.json")
    assert evaluate.main([str(tmp_path)]) == 2
    assert "no complete checkpoint in" in capsys.readouterr().err


def test_the_command_says_what_each_long_step_is_doing(tiny_run_dir, capsys):
    # Restoring, compiling and running the episodes each get a line before they start, on stdout as the training
    # command's do; the result is the last line, and stderr stays empty (it is for the one-line error).
    assert evaluate.main([str(tiny_run_dir), "--episodes", "2"]) == 0
    captured = capsys.readouterr()
    steps = ["restoring the checkpoint at update 6 from ", "restored in ",
             "compiling and running 2 greedy episodes of at most 500 steps ...", "ran the episodes in ",
             "greedy policy, 2 episodes: return"]
    positions = [captured.out.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions), captured.out
    assert "greedy policy" in captured.out.strip().splitlines()[-1] and captured.err == ""
