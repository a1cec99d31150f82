"""ippo and mappo on the multi-agent probes (envs/team_probes.py: known answers, pure JAX, no jaxmarl needed), on
several fake devices, through a SIGKILL and --resume, and their bad inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents.team
import envs
from agents.team import TeamConfig, make_team_ppo
from agents.team.network import AgentInputs
from conftest import resume_and_compare
from helpers import assert_one_line_error
from rlpar.core import hosts, parallel
from rlpar.tools import train as train_cli

COORDINATE, TRUNCATED, MASKED = (f"envs.team_probes:{name}" for name in ("Coordinate", "Truncated", "Masked"))
PROBE = TeamConfig(num_envs=8, num_steps=16, total_timesteps=8 * 16 * 60, lr=3e-3, anneal_lr=False,
                   clip_value=False, update_epochs=4, num_minibatches=2, ent_coef=0.0, hidden_sizes=(16, 16))


def _train(spec, env_id, config=PROBE, **run_options):
    result = (agents.team.train_ippo if spec == "ippo" else agents.team.train_mappo)(
        config, env_id, log_every=max(1, config.num_updates // 4), eval_episodes=8, eval_every=0, **run_options)
    env, env_params = envs.make(env_id)
    agent = make_team_ppo(config, env, env_params, 1, centralised=spec == "mappo")
    state = agent.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1)).replace(params=result.params)
    obs, _ = env.reset(jax.random.PRNGKey(2), env_params)
    return result, agent, state, jax.tree.map(lambda x: x[None], obs)  # one env's observation, batched [1, ...]


@pytest.mark.parametrize("spec", ["ippo", pytest.param("mappo", marks=pytest.mark.slow)])
def test_coordination_probe_agents_agree_and_value_is_one(spec):
    # Each agent gets 1 when both pick the same action: the shared greedy policy agrees, and once the sampled policy
    # has settled on one action every agent's value is 1 (a one-step episode: nothing to bootstrap). The team's
    # episode_return is the sum over its 2 agents: 2.
    result, agent, state, obs = _train(spec, COORDINATE)
    actions, _ = agent.policy(state, True)((), obs, None)
    assert actions.shape == (1, 2) and int(actions[0, 0]) == int(actions[0, 1])
    np.testing.assert_allclose(agent.bootstrap(state, (), obs), [[1.0, 1.0]], atol=0.05)
    record = result.metrics[-1]
    assert record["episode_return"] > 1.9
    assert record["episode/agent_agent_0_return"] == pytest.approx(record["episode_return"] / 2)


def test_time_limit_bootstraps_each_agents_value():
    # Reward 1 per agent per step, cut at 5 steps by the declared time limit, constant observation. gamma = 0.5:
    # bootstrapping gives V = 1 / (1 - 0.5) = 2; reading the cut as termination would fit the mean truncated return
    # (1.9375 + 1.875 + 1.75 + 1.5 + 1) / 5 = 1.61.
    result, agent, state, obs = _train("ippo", TRUNCATED, PROBE.replace(gamma=0.5, num_steps=20,
                                                                          total_timesteps=8 * 20 * 80))
    np.testing.assert_allclose(agent.bootstrap(state, (), obs), [[2.0, 2.0]], atol=0.1)
    assert result.metrics[-1]["episode_length"] == 5


@pytest.mark.slow  # the default run checks masks on the network's sampled and greedy actions (below)
@pytest.mark.parametrize("spec, config", [("ippo", PROBE.replace(gru_size=8, hidden_sizes=(16,))), ("mappo", PROBE)],
                         ids=["recurrent-ippo", "mappo"])
def test_masked_actions_are_never_sampled_in_training(spec, config):
    # Masked: each agent is paid 1 for its masked action. The training return stays exactly 0 in every chunk: no
    # masked action was ever sampled, on 2 devices. (Greedy choice: the test below.)
    result, *_ = _train(spec, MASKED, config.replace(total_timesteps=8 * 16 * 8), devices=2)
    assert all(r["episode_return"] == 0.0 for r in result.metrics)


def test_greedy_and_sampled_actions_avoid_a_masked_action_the_logits_prefer():
    env, env_params = envs.make(MASKED)
    agent = make_team_ppo(PROBE, env, env_params, 1)
    state = agent.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
    bias = state.params["params"]["actor"]["Dense_2"]["bias"]
    state = state.replace(params=jax.tree.map(lambda x: x, state.params))
    state.params["params"]["actor"]["Dense_2"]["bias"] = bias.at[0].set(50.0).at[2].set(50.0)  # favour 0 and 2
    obs, _ = env.reset(jax.random.PRNGKey(2), env_params)
    obs = jax.tree.map(lambda x: jnp.broadcast_to(x, (512,) + x.shape), obs)
    greedy, _ = agent.policy(state, True)((), obs, None)
    np.testing.assert_array_equal(greedy[0], [2, 0])  # agent_0 may not take 0, agent_1 may not take 2
    sampled, _, _ = agent.act(state, (), obs, jax.random.PRNGKey(3))
    assert not np.any(np.asarray(sampled[:, 0]) == 0) and not np.any(np.asarray(sampled[:, 1]) == 2)


def test_recurrent_mappo_params_bit_identical_on_four_devices_with_seeds_and_a_sweep():
    # agent ids as inputs: the probe's observations are zeros, which would leave a zero-initialised network still
    config = PROBE.replace(total_timesteps=8 * 16 * 4, gru_size=8, hidden_sizes=(16,), agent_id=True)
    result = agents.team.train_mappo(config, MASKED, devices=4, num_seeds=2, sweep="lr=0.001,0.003", log_every=2,
                                     eval_every=0)
    slots = result.metrics[-1]["slots"]
    assert len(slots) == 4 and all(s["episode_return"] == 0.0 for s in slots)  # no masked action taken, any slot
    copies = parallel.replicas(result.state.agent.params)
    assert len(copies) == 4
    for other in copies[1:]:
        jax.tree.map(np.testing.assert_array_equal, copies[0], other)
    # the slots are trainings of their own: some parameter differs between any two
    leaves = jax.tree.leaves(copies[0])
    assert all(leaf.shape[0] == 4 for leaf in leaves)
    for i, j in ((0, 1), (0, 2), (1, 3)):
        assert any(not np.array_equal(leaf[i], leaf[j]) for leaf in leaves), (i, j)


def _random_inputs(key, n, env):
    k = jax.random.split(key, 8)
    inputs = AgentInputs(jax.random.normal(k[0], (n, env.obs_size)),
                         jax.nn.one_hot(jax.random.randint(k[1], (n,), 0, env.num_agents), env.num_agents),
                         jnp.ones((n, env.num_actions)), jax.random.normal(k[2], (n, env.world_state_size)))
    from agents.ppo import Batch

    return Batch(inputs, jax.random.randint(k[3], (n,), 0, env.num_actions),
                 jnp.log(jax.random.uniform(k[4], (n,), minval=0.3, maxval=0.7)), jax.random.normal(k[5], (n,)),
                 jax.random.normal(k[6], (n,)) * 2 + 0.5, jax.random.normal(k[7], (n,)))


def test_pmean_gradient_on_two_devices_equals_one_devices_on_the_concatenated_batch():
    env, env_params = envs.make(COORDINATE)
    single = make_team_ppo(PROBE, env, env_params, 4, centralised=True)
    params = single.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1)).params
    batch = _random_inputs(jax.random.PRNGKey(2), 64, env)
    grads_one, info_one = jax.jit(single.grad)(params, batch)
    grad_fn = lambda p, b: make_team_ppo(PROBE, env, env_params, 2, parallel.AXIS_NAME, centralised=True).grad(p, b)
    mapped = jax.pmap(grad_fn, axis_name=parallel.AXIS_NAME, in_axes=(None, 0), out_axes=None,
                      devices=hosts.select_devices(2))
    grads_two, info_two = mapped(params, jax.tree.map(lambda x: x.reshape((2, 32) + x.shape[1:]), batch))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5), grads_one, grads_two)
    np.testing.assert_allclose(info_one.total, info_two.total, atol=1e-5)
    assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads_one)) > 1e-3


# ---- SIGKILL between checkpoints, then --resume: bit-exact (mappo with masks, 2 devices) ----
TINY_ARGV = ["mappo", "--env", MASKED, "--devices", "2", "--num-envs", "4", "--num-steps", "8", "--total-timesteps",
             str(4 * 8 * 6), "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "8",
             "--log-every", "1", "--checkpoint-every", "2", "--eval-every", "3", "--eval-episodes", "4"]


def test_sigkill_then_resume_is_bit_identical_and_the_team_evaluates(killed_run, tiny_run, capsys):
    killed_dir, proc = killed_run
    resume_and_compare(killed_dir, proc, tiny_run, killed_before=[2])
    from rlpar.tools import evaluate

    assert evaluate.main([str(killed_dir), "--episodes", "4"]) == 0  # the greedy team, from the checkpoint
    assert "greedy policy, 4 episodes: return 0.00 +- 0.00" in capsys.readouterr().out  # no masked action taken


# ---- bad input: one line, exit 2, before anything compiles ----
BAD = [
    (["ippo", "--env", "CartPole-v1"], ["ippo needs a multi-agent env", "CartPole-v1 has a single agent"]),
    (["mappo", "--env", "CartPole-v1"], ["mappo needs a multi-agent env"]),
    (["ppo", "--env", COORDINATE], ["ppo takes single-agent envs", "2 agents (agent_0, agent_1)", "ippo, mappo"]),
    (["dqn", "--env", COORDINATE], ["dqn takes single-agent envs"]),
    (["ippo", "--env", COORDINATE, "--action-mask", "on"], ["action_mask='on'", "has none", "auto or off"]),
    (["ippo", "--env", MASKED, "--action-mask", "maybe"], ["action_mask='maybe'", "auto, on, off"]),
    (["ippo", "--env", MASKED, "--gru-size", "8", "--devices", "2", "--num-envs", "6", "--num-minibatches", "2"],
     ["num_minibatches=2 does not divide the environments per device (3)"]),
]


@pytest.mark.parametrize("argv, says", BAD, ids=[" ".join(a[:1] + a[2:3] + a[3:4]) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(argv, says, capsys):
    assert train_cli.main([*argv, "--total-timesteps", "4096"]) == 2
    assert_one_line_error(capsys.readouterr(), says)


def test_a_marl_id_without_the_extra_names_the_pip_command(monkeypatch):
    from envs import marl_suite

    def missing():
        raise ImportError("No module named 'jaxmarl'")

    monkeypatch.setattr(marl_suite, "import_package", missing)
    with pytest.raises(ValueError, match=r'needs the marl extra: pip install -e "\.\[marl\]"') as err:
        envs.make("marl-MPE_simple_spread_v3")
    assert len(str(err.value).splitlines()) == 1
