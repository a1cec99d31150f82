"""The JaxMARL adapter (envs/marl_suite.py) on JaxMARL's own envs: agent-axis arrays, the terminal observation kept,
truncation apart from termination on MPE, SMAX and Overcooked; names refused in one line. Needs the marl extra."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from helpers import assert_one_line_error
from rlpar.tools import train as train_cli

pytest.importorskip("jaxmarl")


def _rollout(env, env_params, steps, state=None, action=None, key=0):
    """``steps`` steps of one env from a reset (or ``state``) with a fixed action; outputs stacked ``[steps, ...]``."""
    key_reset, key_steps = jax.random.split(jax.random.PRNGKey(key))
    obs, start = env.reset(key_reset, env_params)
    state = start if state is None else state
    action = jnp.zeros(env.num_agents, jnp.int32) if action is None else action

    def body(state, key):
        obs, state, reward, terminated, truncated, info = env.step(key, state, action, env_params)
        return state, (obs, reward, terminated, truncated, info)

    run = jax.jit(lambda s, k: jax.lax.scan(body, s, jax.random.split(k, steps))[1])
    return obs, jax.device_get(run(state, key_steps))


def test_mpe_spread_is_cut_at_its_step_limit_with_the_final_observation_kept():
    env, env_params = envs.make("marl-MPE_simple_spread_v3")
    assert env.agent_names == ("agent_0", "agent_1", "agent_2") and env.time_limit == 25
    # JaxMARL's MPE ends an episode on the step its counter passes max_steps: 26 steps of max_steps=25
    obs0, (obs, reward, terminated, truncated, info) = _rollout(env, env_params, 27)
    assert obs0.obs.shape == (3, 18) and obs0.action_mask.shape == (3, 5) and obs0.world_state.shape == (54,)
    np.testing.assert_array_equal(obs0.agent_id, np.eye(3))
    np.testing.assert_array_equal(obs0.world_state, obs0.obs.reshape(-1))  # every agent's observation, in order
    assert reward.shape == (27, 3)
    assert not terminated.any() and np.flatnonzero(truncated).tolist() == [25]  # step 26 is cut: bootstrap
    final = info["final_observation"].obs
    assert not np.allclose(final[25], obs.obs[25])  # the terminal observation, not the reset one
    np.testing.assert_array_equal(final[24], obs.obs[24])
    # the team's return is the agents' summed reward; each agent's own return is an episode metric
    team = info["episode_return"][25]
    agents = [info["episode_metrics"][f"agent_agent_{i}_return"][25] for i in range(3)]
    assert team == pytest.approx(float(np.sum(reward[:26])), rel=1e-5) == pytest.approx(sum(agents), rel=1e-5)


@pytest.mark.slow  # moved out of the default run for its length; CI runs the slow set too
def test_overcooked_is_cut_at_its_step_limit():
    env, env_params = envs.make("marl-overcooked", max_steps=3)
    _, (obs, reward, terminated, truncated, _) = _rollout(env, env_params, 4)
    assert obs.obs.shape == (4, 2, env.obs_size) and reward.shape == (4, 2)
    assert not terminated.any() and truncated.tolist() == [False, False, True, False]


def test_smax_team_wipe_terminates_and_wins_while_its_step_limit_truncates():
    env, env_params = envs.make("marl-HeuristicEnemySMAX@3m", max_steps=2)
    assert env.agent_names == ("ally_0", "ally_1", "ally_2") and env.has_action_masks and env.time_limit == 2
    raw = env.unwrapped.unwrapped  # JaxMARL's own env behind the engine's wrappers and the adapter
    obs, state = env.reset(jax.random.PRNGKey(5), env_params)
    own = state.env_state.env_state
    np.testing.assert_array_equal(obs.action_mask, np.stack([raw.get_avail_actions(own)[a] for a in raw.agents]))
    np.testing.assert_array_equal(obs.world_state, np.asarray(raw.get_world_state(own)).reshape(-1))

    # two envs in one program: [0] as reset; [1] with every enemy dead and its counter at the limit
    inner = own.state
    alive = inner.unit_alive.at[3:].set(False)
    wiped = inner.replace(unit_alive=alive, unit_health=jnp.where(alive, inner.unit_health, 0.0), step=2)
    wiped = state.replace(env_state=state.env_state.replace(env_state=own.replace(state=wiped)))
    states = jax.tree.map(lambda a, b: jnp.stack([a, b]), state, wiped)
    def step(state, key):
        _, state, *out = env.step(key, state, jnp.zeros(3, jnp.int32), env_params)
        return state, tuple(out)  # reward, terminated, truncated, info

    run = jax.jit(jax.vmap(lambda s, k: jax.lax.scan(step, s, jax.random.split(k, 3))[1]))
    _, terminated, truncated, info = jax.device_get(run(states, jax.random.split(jax.random.PRNGKey(6), 2)))
    # like MPE's, SMAX's episode ends on the step its counter passes max_steps: 3 no-op steps of max_steps=2
    assert truncated[0].tolist() == [False, False, True] and not terminated[0].any()
    assert info["episode_metrics"]["won"][0, 2] == 0.0
    # a side wiped out on the step limit: the episode ended on its own (terminated, not bootstrapped), and was won
    assert terminated[1, 0] and not truncated[1, 0] and info["episode_metrics"]["won"][1, 0] == 1.0


class _ShapedProbe:
    """JaxMARL-style: 2 agents, 3-step episodes; each agent's reward is 1 on an episode's last step, and its shaped
    reward (``info["shaped_reward"]``, as Overcooked gives it) 2 on every step."""

    agents = ["agent_0", "agent_1"]
    time_limit = 3

    def observation_space(self, agent):
        from gymnax.environments import spaces

        return spaces.Box(-1.0, 1.0, (1,), jnp.float32)

    def action_space(self, agent):
        from gymnax.environments import spaces

        return spaces.Discrete(2)

    def reset(self, key):
        from envs.team_probes import ProbeState

        return {a: jnp.zeros(1) for a in self.agents}, ProbeState(jnp.int32(0))

    def step_env(self, key, state, actions):
        from envs.team_probes import ProbeState

        state = ProbeState(state.step + 1)
        done = state.step >= 3
        obs, _ = self.reset(key)
        rewards = {a: done.astype(jnp.float32) for a in self.agents}
        dones = {**{a: done for a in self.agents}, "__all__": done}
        return obs, state, rewards, dones, {"shaped_reward": {a: jnp.float32(2.0) for a in self.agents}}


def test_reward_shaping_anneals_into_the_learning_reward_and_never_into_the_returns():
    from envs.marl_suite import TeamEnv
    from rlpar.core import episodes

    env, env_params = envs.make(TeamEnv(_ShapedProbe(), reward_shaping_horizon=4))
    _, (_, reward, _, truncated, info) = _rollout(env, env_params, 7)
    # weight max(0, 1 - k / 4) at the env's k-th step: 1, .75, .5, .25, 0, 0, 0; shaped 2, sparse 1 on steps 3 and 6
    # learning reward per agent: 0 + 2, 0 + 1.5, 1 + 1, 0 + .5, 0, 1 + 0, 0
    np.testing.assert_allclose(reward[:, 0], [2.0, 1.5, 2.0, 0.5, 0.0, 1.0, 0.0])
    np.testing.assert_array_equal(reward[:, 0], reward[:, 1])
    np.testing.assert_array_equal(info["unshaped_reward"][:, 0], [0, 0, 1, 0, 0, 1, 0])
    # the reported returns count the env's own reward: 1 per agent, 2 for the team, in both episodes
    assert truncated[[2, 5]].all()
    assert info["episode_return"][[2, 5]].tolist() == [2.0, 2.0]
    assert info["episode_metrics"]["agent_agent_0_return"][[2, 5]].tolist() == [1.0, 1.0]
    # and so does an evaluation, on fresh envs (where the weight is 1)
    run = episodes.make_episodes(env, env_params, lambda n: (), 4, 10)
    greedy = lambda carry, obs, key: (jnp.zeros((4, 2), jnp.int32), carry)
    assert jax.jit(lambda k: run(greedy, k).returns)(jax.random.PRNGKey(0)).tolist() == [2.0] * 4
    # off by default: the learning reward is the env's own
    plain, plain_params = envs.make(TeamEnv(_ShapedProbe()))
    _, (_, reward, _, _, info) = _rollout(plain, plain_params, 3)
    assert reward[:, 0].tolist() == [0.0, 0.0, 1.0] and "unshaped_reward" not in info


def test_overcooked_preset_shapes_like_jaxmarl_ippo_ff_overcooked():
    from agents.team import TeamConfig

    config = TeamConfig.for_env("marl-overcooked")
    assert (config.num_envs, config.num_steps, config.total_timesteps) == (16, 128, 5_000_000)
    # JaxMARL's REW_SHAPING_HORIZON counts team steps over all 16 envs: 2.5e6 / 16 steps of each env
    assert config.env_kwargs() == {"reward_shaping_horizon": 156_250}
    assert TeamConfig.for_env("marl-MPE_simple_spread_v3").env_kwargs() == {}
    env, _ = envs.make("marl-overcooked", **config.env_kwargs())
    assert env.unwrapped.reward_shaping_horizon == 156_250


BAD = [
    (["ippo", "--env", "marl-MPE_simple_sprad_v3"],
     ["unknown JaxMARL env", "Did you mean 'marl-MPE_simple_spread_v3'"]),
    (["ippo", "--env", "marl-HeuristicEnemySMAX@3mm"], ["unknown SMAX map '3mm'", "3m"]),
    (["ippo", "--env", "marl-MPE_simple_spread_v3@3m"], ["only taken by the SMAX envs"]),
    (["ppo", "--env", "marl-MPE_simple_spread_v3"], ["ppo takes single-agent envs", "3 agents"]),
    (["mappo", "--env", "marl-MPE_simple_spread_v3", "--action-mask", "on"], ["has none"]),
    (["ippo", "--env", "marl-MPE_simple_spread_v3", "--reward-shaping-horizon", "1000"],
     ["reward_shaping_horizon=", "no info['shaped_reward']", "marl-overcooked"]),
    (["ippo", "--env", "marl-overcooked", "--reward-shaping-horizon", "-5"],
     ["reward_shaping_horizon=-5", ">= 0"]),
]


@pytest.mark.parametrize("argv, says", BAD, ids=[" ".join(a[:3]) for a, _ in BAD])
def test_bad_jaxmarl_names_are_one_line_and_exit_2(argv, says, capsys):
    assert train_cli.main([*argv, "--total-timesteps", "4096"]) == 2
    assert_one_line_error(capsys.readouterr(), says)


@pytest.mark.slow  # trains a tiny SMAX run first (about 50 s of compiling), then draws 18 frames
def test_smax_gif_replays_the_recorded_steps_through_jaxmarls_visualiser(tmp_path):
    pytest.importorskip("matplotlib")
    from PIL import Image

    import agents.team
    from agents.team import TeamConfig
    from rlpar.tools import gif

    config = TeamConfig(num_envs=2, num_steps=4, total_timesteps=2 * 4 * 2, num_minibatches=1, update_epochs=1,
                        hidden_sizes=(8,))
    agents.team.train_mappo(config, "marl-HeuristicEnemySMAX@3m", run_dir=str(tmp_path / "run"), eval_every=0,
                            devices=1)
    path = tmp_path / "smax.gif"
    gif.check_gif(tmp_path / "run", path)  # SMAX is drawn, no longer refused
    frames = gif.write_gif(tmp_path / "run", path, max_frames=2)
    env = envs.make("marl-HeuristicEnemySMAX@3m")[0].unwrapped.unwrapped
    # JaxMARL's EnemySMAX expands each step to its state before the step and one per world tick
    assert frames == 2 * (1 + env.world_steps_per_env_step)
    with Image.open(path) as image:
        assert image.format == "GIF" and image.n_frames > 1
        first, last = np.asarray(image.convert("RGB")), None
        image.seek(image.n_frames - 1)
        last = np.asarray(image.convert("RGB"))
    assert first.std() > 0 and not np.array_equal(first, last)  # drawn, and the units moved


def test_overcooked_frames_through_jaxmarls_grid_renderer():
    pytest.importorskip("matplotlib")
    env, env_params = envs.make("marl-overcooked")
    team = env.unwrapped
    team.check_render()  # drawn, not refused
    _, start = env.reset(jax.random.PRNGKey(0), env_params)
    # both agents move right (action 1) for 2 steps: the states before each step, stacked [3, ...]
    states, state, step = [start.env_state.env_state], start, jax.jit(env.step)
    for t in range(2):
        _, state, *_ = step(jax.random.PRNGKey(t), state, jnp.ones(2, jnp.int32), env_params)
        states.append(state.env_state.env_state)
    frames = team.render_frames(jax.tree.map(lambda *x: jnp.stack(x), *states))
    # cramped_room's 5 x 4 cells and a ring of one cell around them, 32 pixels a cell
    assert frames.shape == (3, 6 * 32, 7 * 32, 3) and frames.dtype == np.uint8 and frames.std() > 0
    assert not np.array_equal(frames[0], frames[-1])  # the agents moved
