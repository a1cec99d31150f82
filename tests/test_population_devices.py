"""A population spread over device groups (``--population-devices M``): a 2-D mesh, population x data.

Each group of ``D/M`` devices trains its own members on all of their environments. What one predicts: with one device
per group a member trains exactly as it would alone on one device; with several, the devices of a group hold the same
parameters bit for bit, as a data-parallel run's do; PBT ranks and copies across groups; checkpoints, resume and
evaluation work as for one group. Run on 4 fake CPU devices."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
from conftest import resume_and_compare
from rlpar.core import collectives, parallel, platform, population, program, seeds
from rlpar.tools import evaluate
from rlpar.tools import train as train_cli

# 4 members on 4 devices as 2 groups of 2: PBT every 3 updates ranked by a greedy evaluation of 4 episodes (2 per
# device of a group), chunks of 2 updates, a checkpoint after each.
TINY_ARGV = [
    "ppo", "--env", "CartPole-v1", "--devices", "4", "--population-devices", "2", "--num-envs", "4",
    "--num-steps", "8", "--total-timesteps", str(4 * 8 * 8), "--num-minibatches", "2", "--update-epochs", "1",
    "--hidden-sizes", "16", "--log-every", "2", "--checkpoint-every", "2", "--eval-every", "4",
    "--eval-episodes", "4", "--search", "lr=log:1e-4..1e-2 ent_coef=0..0.05", "--population", "4",
    "--pbt", "--pbt-interval", "3", "--pbt-fitness", "eval", "--pbt-resample", "0",
]

SMALL = dict(num_envs=8, num_steps=16, total_timesteps=8 * 16 * 6, num_minibatches=2, update_epochs=1,
             hidden_sizes=(16,))
LRS = (1e-3, 2e-3, 3e-3, 4e-3)
RUN = dict(log_every=3, eval_every=0, compile_cache="off")


def _member(params, i):
    return jax.tree.map(lambda x: np.asarray(x)[i], params)


def _assert_same(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    jax.tree.map(np.testing.assert_array_equal, a, b)


def test_one_device_per_group_trains_each_member_as_it_would_alone_on_one_device():
    config = agents.PPOConfig.for_env("CartPole-v1").replace(**SMALL)
    spread = agents.ppo.train(config, "CartPole-v1", devices=4, population_devices=4,
                              search="lr=" + ",".join(map(str, LRS)), **RUN)
    alone = agents.ppo.train(config, "CartPole-v1", devices=1, search=f"lr={LRS[3]}", **RUN)
    # member 3 sits on device 3, its keys those of device 0 of a one-device run: the same training, bit for bit
    _assert_same(_member(spread.params, 3), _member(alone.params, 0))
    assert spread.metrics[-1]["slots"][3]["episode_return"] == alone.metrics[-1]["slots"][0]["episode_return"]
    rows = parallel.replicas(spread.state.agent.params)  # [1 member] per device, each a different member
    assert not np.array_equal(jax.tree.leaves(rows[0])[0], jax.tree.leaves(rows[3])[0])


@pytest.mark.slow
@pytest.mark.parametrize("groups, group_size", [(2, 2), (1, 4)], ids=["2x2", "1x4"])
def test_several_devices_per_group_hold_one_copy_and_train_the_member_as_a_data_parallel_run(groups, group_size):
    config = agents.PPOConfig.for_env("CartPole-v1").replace(**SMALL)
    spread = agents.ppo.train(config, "CartPole-v1", devices=4, population_devices=groups,
                              search="lr=" + ",".join(map(str, LRS)), **RUN)
    rows = parallel.replicas(spread.state.agent.params)  # device p holds its group's members
    for group in range(groups):
        for k in range(1, group_size):
            _assert_same(rows[group * group_size], rows[group * group_size + k])
    alone = agents.ppo.train(config, "CartPole-v1", devices=group_size, search=f"lr={LRS[1]}", **RUN)
    # The same keys and environments; vmap over 4 // groups members instead of 1 lets XLA batch the arithmetic
    # differently, so the last bits may differ (1.5e-8 at most, measured on the 2x2 layout).
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=0, atol=1e-6),
                 _member(spread.params, 1), _member(alone.params, 0))


@pytest.mark.slow
def test_grouped_evaluation_as_a_program_of_its_own_matches_the_branch():
    # The accelerators' answer (rlpar.core.platform.evaluation_in_chunk) on 2 groups of 2 devices, under shard_map:
    # each member's evaluation gathered within its group, the same records and parameters as the branch's.
    config = agents.PPOConfig.for_env("CartPole-v1").replace(**SMALL)
    runs = {}
    for inside in (True, False):
        with platform.forcing(evaluation_in_chunk=inside):
            runs[inside] = agents.ppo.train(config, "CartPole-v1", devices=4, population_devices=2,
                                            backend="shard_map", search="lr=" + ",".join(map(str, LRS)),
                                            **{**RUN, "eval_every": 3, "eval_episodes": 4})
    timing = ("time_s", "sps", "startup_s")
    records = {inside: [{k: v for k, v in r.items() if k not in timing} for r in run.metrics]
               for inside, run in runs.items()}
    assert records[False] == records[True]
    assert all("eval/episode_return" in slot for slot in runs[False].metrics[-1]["slots"])
    _assert_same(runs[False].params, runs[True].params)


def test_a_pbt_round_ranks_and_copies_across_device_groups():
    # 4 members on a 2x2 mesh: group 0 holds members 0 and 1, group 1 members 2 and 3. Fitness [3, 1, 4, 2]: member 1
    # (group 0) copies member 2 (group 1), the only one in the top quarter.
    groups, devices = 2, jax.devices()[:4]
    layout = collectives.MemberGroups(groups)
    pbt = population.PBT(interval=3, quantile=0.25, resample=0.0, fitness="train", num_updates=8)
    spaces = seeds.parse_search("lr=0..10")
    members = population.start({"lr": jnp.array([1.0, 2.0, 3.0, 4.0])}, jax.random.PRNGKey(0), 4)
    members = members.replace(return_sum=jnp.array([3.0, 1.0, 4.0, 2.0]), episodes=jnp.ones(4),
                              updates=jnp.full((4,), 3, jnp.int32))
    state = program.TrainState(agent={"w": jnp.arange(4.0)}, rollout={"env": jnp.arange(4.0) + 10},
                               population=members)
    host = jax.tree.map(lambda x: np.stack([np.asarray(x)] * 2), state)  # [2 devices per group, 4 members, ...]

    def make_step(axis_name):
        one_round = population.make_round(pbt, spaces, None, layout)

        def step(s):
            s, metrics = one_round(s)
            return s, seeds.same_on_every_device(metrics, layout.axes(axis_name))

        return step

    step = parallel.map_step(make_step, devices, donate=False, backend="shard_map", groups=groups)
    placed = parallel.rows_from_host(host, devices, groups)
    assert placed.agent["w"].shape == (4, 2)  # device p holds group p // 2's two members
    out, metrics = step(placed)
    assert np.asarray(metrics[population.PARENT]).tolist() == [0, 2, 2, 3]
    assert np.asarray(metrics[population.FITNESS_KEY]).tolist() == [3.0, 1.0, 4.0, 2.0]
    back = parallel.rows_to_host(out, groups)
    assert back.agent["w"].tolist() == [[0.0, 2.0, 2.0, 3.0]] * 2  # member 2's agent, from the other group
    assert back.rollout["env"].tolist() == [[10.0, 11.0, 12.0, 13.0]] * 2  # environments stay
    assert back.population.hparams["lr"][0, 1] in (pytest.approx(2.4), pytest.approx(3.6))  # 3 x 0.8 or 1.2
    assert back.population.return_sum.tolist() == [[0.0] * 4] * 2


def test_pbt_over_device_groups_resumes_bit_identically_and_the_group_devices_agree(tiny_run, killed_run):
    resumed = resume_and_compare(*killed_run, tiny_run, killed_before=[2])  # killed before update 4's save
    # a checkpoint reads [devices per group, members, ...] whatever the groups: 2 x 4 here
    assert resumed["population"]["hparams"]["lr"].shape == (2, 4)
    # the two devices of each group hold the same parameters and optimizer state (their keys differ, as in any
    # data-parallel run: each device shuffles and acts on its own environments)
    agent = {name: value for name, value in resumed["agent"].items() if name != "key"}
    assert "params" in agent and len(agent) >= 2
    for leaf in jax.tree.leaves(agent):
        np.testing.assert_array_equal(leaf[0], leaf[1])
    config = json.loads((tiny_run / "config.json").read_text())
    assert config["run"]["population_devices"] == 2 and config["num_devices"] == 4
    rounds = population.rounds_of([json.loads(x) for x in (tiny_run / "metrics.jsonl").read_text().splitlines()])
    assert [r["update"] for r in rounds] == [3, 6] and all(f is not None for r in rounds for f in r["fitness"])


def test_evaluate_reads_a_grouped_run_and_picks_its_best_member(tiny_run, capsys):
    best = population.best_member([json.loads(x) for x in (tiny_run / "metrics.jsonl").read_text().splitlines()])
    assert evaluate.load_policy(tiny_run).slot == best
    assert evaluate.main([str(tiny_run), "--episodes", "2"]) == 0
    results = [line for line in capsys.readouterr().out.splitlines() if "greedy policy" in line]
    assert len(results) == 1 and f"slot {best} (the fittest member)" in results[0]


@pytest.mark.parametrize("flags, message", [
    (["--devices", "4", "--population-devices", "3", "--population", "6"],
     "population_devices=3: must divide the 4 device(s) into equal groups: use one of 1, 2, 4"),
    (["--devices", "4", "--population-devices", "4", "--population", "6"],
     "population_devices=4: the run's 6 slot(s) (members x --num-seeds) do not split evenly into 4 device groups"),
    (["--devices", "2", "--population-devices", "2", "--backend", "pmap"],
     "backend='pmap' maps one device axis; population_devices=2 needs a 2-D device mesh: use --backend shard_map"),
    (["--population-devices", "0"], "population_devices=0: must be a positive integer"),
], ids=["devices-not-divisible", "members-not-divisible", "pmap", "zero"])
def test_bad_layouts_are_one_line_before_compiling(flags, message, capsys):
    population = [] if "--population" in flags else ["--population", "4"]  # a flag is given once
    argv = ["ppo", "--num-envs", "4", "--num-steps", "8", "--total-timesteps", "320", "--num-minibatches", "2",
            "--search", "lr=log:1e-4..1e-2", *population, *flags]
    assert train_cli.main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err, captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
    assert "compiling" not in captured.out
