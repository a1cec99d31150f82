"""Populations: searches over several fields, hyperparameters as training state, and population-based training."""

import json
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
from agents.ppo import PPOConfig
from conftest import resume_and_compare
from rlpar.core import population, program, seeds
from rlpar.run import runner
from rlpar.tools import train as train_cli

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # one per XLA compilation

# 4 members drawn from two ranges, PBT every 3 updates (rounds after updates 3 and 6; none after the last, 8),
# ranked by a greedy evaluation of 4 episodes, explore always perturbing (no redraws); chunks of 2 updates, a
# checkpoint after each.
TINY_ARGV = [
    "ppo", "--env", "CartPole-v1", "--devices", "2", "--num-envs", "4", "--num-steps", "8",
    "--total-timesteps", str(4 * 8 * 8), "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "16",
    "--log-every", "2", "--checkpoint-every", "2", "--eval-every", "4", "--eval-episodes", "4",
    "--search", "lr=log:1e-4..1e-2 ent_coef=0..0.05", "--population", "4",
    "--pbt", "--pbt-interval", "3", "--pbt-fitness", "eval", "--pbt-resample", "0",
]


# ---- searches: which members a run has ----

def test_search_grid_is_the_product_of_the_lists_in_the_order_given():
    slots = seeds.make_slots(2, "", PPOConfig, search="gamma=0.9,0.99 lr=1e-3,1e-2")
    # members (gamma, lr): (0.9, 1e-3), (0.9, 1e-2), (0.99, 1e-3), (0.99, 1e-2); two seeds each
    assert slots.seed_index == (0, 1) * 4
    assert slots.hparams == {"gamma": (0.9,) * 4 + (0.99,) * 4, "lr": (1e-3, 1e-3, 1e-2, 1e-2) * 2}
    assert slots.describe()[2] == {"slot": 2, "seed_index": 0, "gamma": 0.9, "lr": 1e-2}


def test_sweep_times_search_and_the_sweep_alone_is_a_one_field_grid():
    slots = seeds.make_slots(1, "vf_coef=0.5,1", PPOConfig, search="gamma=0.9,0.99")
    assert slots.hparams == {"vf_coef": (0.5, 0.5, 1.0, 1.0), "gamma": (0.9, 0.99, 0.9, 0.99)}
    assert seeds.make_slots(2, "lr=0.1,0.2", PPOConfig).hparams == {"lr": (0.1, 0.1, 0.2, 0.2)}


def test_population_draws_are_seeded_and_stay_in_their_space():
    search = "lr=log:1e-4..1e-2 ent_coef=0..0.05 gamma=0.9,0.99"
    slots = seeds.make_slots(1, "", PPOConfig, search=search, population=64, seed=3)
    assert slots.count == 64
    lr, ent, gamma = (np.asarray(slots.hparams[k]) for k in ("lr", "ent_coef", "gamma"))
    assert np.all((1e-4 <= lr) & (lr <= 1e-2)) and np.all((0 <= ent) & (ent <= 0.05))
    assert set(gamma) == {0.9, 0.99}
    # log-uniform: about half the draws below the geometric middle 1e-3 (a uniform draw puts ~9% there)
    assert 16 <= np.sum(lr < 1e-3) <= 48
    assert seeds.make_slots(1, "", PPOConfig, search=search, population=64, seed=3) == slots
    assert seeds.make_slots(1, "", PPOConfig, search=search, population=64, seed=4).hparams != slots.hparams


# ---- bad input: one line naming the value and what is accepted, exit 2, before anything compiles ----

TINY_FLAGS = ["ppo", "--num-envs", "4", "--num-steps", "8", "--total-timesteps", "320", "--num-minibatches", "2"]


@pytest.mark.parametrize("flags, message", [
    (["--search", "hidden_sizes=8,16"], "search='hidden_sizes=8,16': expected FIELD=V1,V2 | FIELD=LOW..HIGH"),
    (["--search", "nope=1,2"], "with FIELD one of lr, gamma"),
    (["--search", "lr=log:0..1", "--population", "2"], "a log range needs 0 < LOW < HIGH"),
    (["--search", "ent_coef=0.5..0.1", "--population", "2"], "a range LOW..HIGH needs finite LOW < HIGH"),
    (["--search", "gamma=0.5..1.5", "--population", "2"], "gamma=1.5 (from --sweep/--search) is refused: gamma"),
    (["--search", "lr=1e-4..1e-3"], "lr is a range, so members are drawn from it: give --population N"),
    (["--search", "lr=1e-4,1e-3", "--sweep", "lr=1e-2,1e-1"], "both set lr: give it in one of them"),
    (["--population", "4"], "population=4 draws members from --search: give --search too"),
    (["--search", "lr=log:1e-4..1e-2", "--population", "4", "--pbt", "--pbt-interval", "10"],
     "pbt_interval=10 is not shorter than the run (10 updates)"),
    (["--search", "lr=1e-3", "--pbt"], "pbt with 1 member: a population needs at least 2"),
    (["--pbt"], "pbt needs --search"),
    (["--search", "lr=1e-3,1e-2", "--pbt", "--pbt-quantile", "0.75"], "pbt_quantile=0.75: must be in (0, 0.5]"),
    (["--search", "lr=1e-3,1e-2", "--pbt", "--pbt-fitness", "best"], "pbt_fitness='best': must be one of train"),
    (["--search", "lr=1e-3,1e-2", "--pbt", "--pbt-fitness", "eval", "--eval-every", "0"],
     "pbt_fitness='eval' evaluates at each PBT round: give --eval-every -1 or N (not 0)"),
], ids=["unsweepable", "unknown", "log-from-zero", "low-above-high", "refused-at-the-end", "range-without-population",
        "search-and-sweep-same-field", "population-without-search", "interval-too-long", "pbt-one-member",
        "pbt-without-search", "quantile", "fitness", "eval-fitness-without-evaluation"])
def test_bad_population_input_is_one_line_before_compiling(flags, message, capsys):
    assert train_cli.main([*TINY_FLAGS, *flags]) == 2
    captured = capsys.readouterr()
    assert message in captured.err, captured.err
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err
    assert "compiling" not in captured.out


# ---- exploit and explore: pure functions, checked by hand on 4 members ----

def test_exploit_bottom_quarter_copies_the_top_quarter():
    # fitness [3, 1, 4, 2]: with quantile 0.25 one member is replaced: the worst (member 1, fitness 1) copies the
    # best (member 2, fitness 4); every leaf of the members is copied, whatever its shape.
    members = {"w": jnp.array([[0.0, 0.5], [1.0, 1.5], [2.0, 2.5], [3.0, 3.5]]), "n": jnp.array([10, 11, 12, 13])}
    copied, parent = population.exploit(members, jnp.array([3.0, 1.0, 4.0, 2.0]), jax.random.PRNGKey(0), 0.25)
    assert parent.tolist() == [0, 2, 2, 3]
    assert copied["w"].tolist() == [[0.0, 0.5], [2.0, 2.5], [2.0, 2.5], [3.0, 3.5]]
    assert copied["n"].tolist() == [10, 12, 12, 13]


def test_exploit_half_copies_from_the_top_half_and_nan_ranks_lowest():
    # fitness [3, nan, 4, 2], quantile 0.5: ranked lowest first 1 (nan), 3 (2), 0 (3), 2 (4): members 1 and 3 each
    # copy one of members 0 and 2; 0 and 2 keep their own.
    for seed in range(8):
        _, parent = population.exploit(jnp.arange(4), jnp.array([3.0, jnp.nan, 4.0, 2.0]),
                                       jax.random.PRNGKey(seed), 0.5)
        assert parent[0] == 0 and parent[2] == 2 and parent[1] in (0, 2) and parent[3] in (0, 2)
    assert [population.replaced_count(n, q) for n, q in ((4, 0.25), (8, 0.25), (2, 0.25), (4, 0.5))] == [1, 2, 1, 2]
    # no member scored yet (no episode finished): nobody copies anybody
    _, parent = population.exploit(jnp.arange(4), jnp.full((4,), jnp.nan), jax.random.PRNGKey(0), 0.5)
    assert parent.tolist() == [0, 1, 2, 3]


def test_explore_perturbs_only_copied_members_by_0_8_or_1_2_within_the_space():
    spaces = seeds.parse_search("lr=log:1e-4..1e-2 gamma=0.9,0.99")
    hparams = {"lr": jnp.array([1e-3, 1e-3, 1e-3, 1e-2]), "gamma": jnp.array([0.95, 0.95, 0.95, 0.95])}
    parent = jnp.array([0, 0, 2, 0])  # members 1 and 3 copied member 0 (its values are already theirs here)
    seen = set()
    for seed in range(16):
        out = population.explore(hparams, parent, jax.random.PRNGKey(seed), spaces, resample=0.0)
        assert out["lr"][0] == hparams["lr"][0] and out["lr"][2] == hparams["lr"][2]  # kept
        ratio = float(out["lr"][1] / hparams["lr"][1])
        assert ratio == pytest.approx(0.8) or ratio == pytest.approx(1.2)
        seen.add(round(ratio, 3))
        assert out["lr"][3] in (np.float32(1e-2 * 0.8), np.float32(1e-2))  # 1.2 x 1e-2 clipped to the space's top
        # 0.95 x 0.8 = 0.76 and 0.95 x 1.2 = 1.14 both leave the list's [0.9, 0.99]: clipped to its ends
        assert out["gamma"][1] in (np.float32(0.9), np.float32(0.99))
    assert seen == {0.8, 1.2}
    resampled = population.explore(hparams, parent, jax.random.PRNGKey(0), spaces, resample=1.0)
    assert set(np.asarray(resampled["gamma"])[[1, 3]].tolist()) <= {np.float32(0.9), np.float32(0.99)}


def test_a_round_copies_the_agent_not_the_environments_and_resets_the_fitness():
    # Member fitness from training returns: [5, 1, 3, 2] (return_sum / episodes), so member 1 copies member 0.
    members = population.start({"lr": jnp.array([1.0, 2.0, 3.0, 4.0])}, jax.random.PRNGKey(0), 4)
    members = members.replace(return_sum=jnp.array([10.0, 1.0, 3.0, 4.0]), episodes=jnp.array([2.0, 1.0, 1.0, 2.0]),
                              updates=jnp.full((4,), 3, jnp.int32))
    state = program.TrainState(agent={"w": jnp.arange(4.0)}, rollout={"env": jnp.arange(4.0) + 10}, population=members)
    pbt = population.PBT(interval=3, quantile=0.25, resample=0.0, fitness="train", num_updates=8)
    state, metrics = population.make_round(pbt, seeds.parse_search("lr=0..10"), None)(state)
    assert metrics[population.PARENT].tolist() == [0, 0, 2, 3] and metrics[population.ROUND].all()
    assert metrics[population.FITNESS_KEY].tolist() == [5.0, 1.0, 3.0, 2.0]
    assert state.agent["w"].tolist() == [0.0, 0.0, 2.0, 3.0]
    assert state.rollout["env"].tolist() == [10.0, 11.0, 12.0, 13.0]
    assert float(state.population.hparams["lr"][1]) in (pytest.approx(0.8), pytest.approx(1.2))
    assert state.population.return_sum.tolist() == [0.0] * 4 and state.population.episodes.tolist() == [0.0] * 4
    # not due (4 is no multiple of 3): nothing changes
    later = state.replace(population=state.population.replace(updates=jnp.full((4,), 4, jnp.int32)))
    same, metrics = population.make_round(pbt, seeds.parse_search("lr=0..10"), None)(later)
    assert not metrics[population.ROUND].any() and same.agent["w"].tolist() == [0.0, 0.0, 2.0, 3.0]


# ---- a PBT run: one compile, values in the state, lineage logged, resumable bit for bit ----

class _Compiles:
    """XLA compilations from the runner's ``compiling`` status on (the init compiles in a thread of its own: not
    counted)."""

    def __init__(self):
        self.count, self.counting = 0, False

    def on_event(self, event, duration, **kwargs):
        if event == COMPILE_EVENT and self.counting and not threading.current_thread().name.startswith("rlpar-init"):
            self.count += 1

    def on_status(self, event, info):
        self.counting = self.counting or event == "compiling"


@pytest.fixture(scope="module")
def tiny_run(killed_run, tmp_path_factory):
    """This module's TINY_ARGV run whole, from its flags as the CLI parses them, XLA compilations counted:
    ``(run_dir, count)``."""
    run_dir = tmp_path_factory.mktemp("pbt") / "run"
    spec = agents.ppo.SPEC
    run_config, config = train_cli.parse_run_args(spec, [*TINY_ARGV[1:], "--run-dir", str(run_dir)])
    compiles = _Compiles()
    jax.monitoring.register_event_duration_secs_listener(compiles.on_event)
    try:
        runner.run(spec, config, run_config, hooks=runner.Hooks(on_status=compiles.on_status))
    finally:
        jax.monitoring.unregister_event_duration_listener(compiles.on_event)
    return run_dir, compiles.count


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_pbt_run_compiles_one_program_while_its_values_change(tiny_run):
    run_dir, count = tiny_run
    assert count == 1  # the chunk program: every member, every value, both rounds
    records = _records(run_dir)
    rounds = [r for record in records for r in record.get("pbt", [])]
    assert [r["update"] for r in rounds] == [3, 6]
    start = json.loads((run_dir / "config.json").read_text())["slots"]
    before = {"lr": [s["lr"] for s in start], "ent_coef": [s["ent_coef"] for s in start]}
    for r in rounds:
        copies = [i for i, p in enumerate(r["parent"]) if p != i]
        assert len(copies) == 1  # 4 members, quantile 0.25
        best = max(range(4), key=lambda i: r["fitness"][i])
        assert r["parent"][copies[0]] in [i for i in range(4) if r["fitness"][i] == r["fitness"][best]]
        for name, (low, high) in (("lr", (1e-4, 1e-2)), ("ent_coef", (0.0, 0.05))):
            for i, p in enumerate(r["parent"]):  # a copy: its parent's value x 0.8 or 1.2, clipped; others keep
                now, was = r["hparams"][name][i], before[name][p]
                options = [min(max(was * f, low), high) for f in (0.8, 1.2)] if p != i else [was]
                assert any(now == pytest.approx(o, rel=1e-5, abs=1e-9) for o in options), (name, i, now, options)
        assert all(f is not None for f in r["fitness"])  # ranked by an evaluation: every member has one
        before = r["hparams"]
    last = records[-1]["slots"]
    assert [s["hparams"]["lr"] for s in last] == before["lr"]  # no round after update 6


def test_pbt_sigkill_then_resume_is_bit_identical_population_included(tiny_run, killed_run):
    run_dir, _ = tiny_run
    resumed = resume_and_compare(*killed_run, run_dir, killed_before=[2])  # killed before update 4's save
    assert resumed["population"]["hparams"]["lr"].shape == (2, 4)  # [devices, members]: the values are state


def test_population_jsonl_holds_each_round_and_is_rebuilt_on_resume(tiny_run, killed_run):
    run_dir, _ = tiny_run
    lines = [json.loads(x) for x in (run_dir / "population.jsonl").read_text().splitlines()]
    rounds = population.rounds_of(_records(run_dir))
    assert [line["update"] for line in lines] == [3, 6] and [line["env_steps"] for line in lines] == [96, 192]
    for line, r in zip(lines, rounds):
        assert [m["parent"] for m in line["members"]] == r["parent"]
        assert [m["fitness"] for m in line["members"]] == r["fitness"]
        assert [m["lr"] for m in line["members"]] == r["hparams"]["lr"]
    # the killed run was resumed by the test above (or is resumed here): its population.jsonl, cut back to update 2
    # and written on from there, is the uninterrupted run's byte for byte
    killed_dir, proc = killed_run
    if proc.returncode is None:
        resume_and_compare(killed_dir, proc, run_dir, killed_before=[2])
    assert (killed_dir / "population.jsonl").read_bytes() == (run_dir / "population.jsonl").read_bytes()


def test_best_member_is_the_last_rounds_fittest_else_the_last_evaluation_else_recent_returns():
    slot = lambda ret, n=1, **extra: {"episode_return": ret, "episodes": n, **extra}  # noqa: E731
    plain = [{"slots": [slot(1.0), slot(5.0), slot(None, 0)]}, {"slots": [slot(9.0), slot(2.0), slot(3.0)]}]
    assert population.best_member(plain) == 0  # recent returns: member 0 (1 + 9) / 2 = 5, 1: 3.5, 2: 3
    evaluated = plain + [{"slots": [slot(1.0, **{"eval/episode_return": 3.0}), slot(1.0, **{"eval/episode_return":
                                                                                              7.0}),
                                    slot(1.0, **{"eval/episode_return": 5.0})]}]
    assert population.best_member(evaluated) == 1
    ranked = evaluated + [{"slots": [slot(1.0)] * 3, "pbt": [{"fitness": [None, 2.0, 4.0]}]}]
    assert population.best_member(ranked) == 2
    assert population.best_member([{"episode_return": 3.0}]) is None


def test_progress_and_done_lines_name_the_best_member_and_its_values(tiny_run):
    from rlpar.run import progress

    record = {"slots": [{"episode_return": 20.0, "hparams": {"lr": 0.001}},
                        {"episode_return": 30.0, "hparams": {"lr": 0.000256123}}]}
    assert progress.format_return(record, progress.MEMBERS) == "best 1 (lr=0.000256): 30.00"
    run_dir, _ = tiny_run
    records = _records(run_dir)
    best = population.best_member(records)
    run_config, config = train_cli.parse_run_args(agents.ppo.SPEC, TINY_ARGV[1:])
    result = runner.TrainResult(None, [{**r, "time_s": 1.0} for r in records], None, 1.0)
    done = train_cli.done_line(result, run_config, config)
    values = progress.format_values(records[-1]["slots"][best]["hparams"])
    assert done.endswith(f"; best member {best} (ranked at the last PBT round): {values}")


def test_evaluate_and_load_policy_default_to_the_best_member(tiny_run, capsys):
    from rlpar.tools import evaluate

    run_dir, _ = tiny_run
    best = population.best_member(_records(run_dir))
    assert evaluate.load_policy(run_dir).slot == best == evaluate.load_policy(run_dir, slot="best").slot
    assert evaluate.main([str(run_dir), "--episodes", "2"]) == 0
    results = [line for line in capsys.readouterr().out.splitlines() if "greedy policy" in line]  # not progress
    assert len(results) == 1 and f"slot {best} (the fittest member)" in results[0]
    assert evaluate.main([str(run_dir), "--episodes", "2", "--slot", "9"]) == 2
    assert "use 0..3, or best" in capsys.readouterr().err


def test_plot_draws_each_members_return_and_each_values_schedule(tiny_run, tmp_path):
    from rlpar.tools import plot

    run_dir, _ = tiny_run
    fig = plot.population_figure(run_dir)
    returns, lr, ent_coef = fig.axes
    assert len(fig.axes) == 3 and lr.get_ylabel() == "lr" and ent_coef.get_ylabel() == "ent_coef"
    rounds = population.rounds_of(_records(run_dir))
    for i, line in enumerate(lr.get_lines()[:4]):  # member i's lr: its start value, then after each round
        start = json.loads((run_dir / "config.json").read_text())["slots"][i]["lr"]
        assert list(line.get_ydata()[:3]) == pytest.approx([start] + [r["hparams"]["lr"][i] for r in rounds])
    assert plot.main([str(run_dir), "--out", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_tensorboard_tags_for_members_values_and_no_lineage():
    from rlpar.run import logs

    record = {"update": 3, "env_steps": 96, "episode_return": 1.0, "pbt": [{"parent": [0, 0]}],
              "slots": [{"episode_return": 2.0, "hparams": {"lr": 0.5}}]}
    assert logs.tensorboard_scalars(record) == {"train/episode_return": 1.0, "slot0/train/episode_return": 2.0,
                                                "slot0/hparams/lr": 0.5}
