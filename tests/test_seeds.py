"""Seeds and a hyperparameter vmapped in one compiled run."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import agents
from agents.ppo import PPOConfig
from rlpar.core import parallel, seeds
from rlpar.run import build, prepare
from rlpar.run.runner import RunConfig, run
from rlpar.tools import train as train_cli

REPO = Path(__file__).resolve().parents[1]
TINY = PPOConfig(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 4, num_minibatches=2, update_epochs=1)


def test_slots_layout():
    slots = seeds.make_slots(2, "lr=0.1,0.2,0.3")
    assert slots.seed_index == (0, 1, 0, 1, 0, 1)
    assert slots.hparams == {"lr": (0.1, 0.1, 0.2, 0.2, 0.3, 0.3)}
    assert slots.describe()[3] == {"slot": 3, "seed_index": 1, "lr": 0.2}


@pytest.mark.parametrize("sweep, message", [
    ("lr", "expected FIELD=V1,V2"), ("num_envs=4,8", "expected FIELD=V1,V2"), ("lr=a,b", "must be numbers"),
])
def test_bad_sweep_is_a_clear_error(sweep, message):
    with pytest.raises(ValueError, match=message):
        seeds.make_slots(1, sweep, PPOConfig)


def test_sweepable_fields_are_declared_by_the_config():
    from rlpar.agent import sweepable_fields

    assert sweepable_fields(PPOConfig) == ("lr", "gamma", "gae_lambda", "clip_eps", "ent_coef", "vf_coef",
                                           "max_grad_norm")
    with pytest.raises(ValueError, match="FIELD one of lr, gamma"):  # the message lists the config's own fields
        seeds.make_slots(1, "hidden_sizes=8,16", PPOConfig)


def test_seeds_are_independent_and_match_single_slot_programs():
    result = run(agents.ppo.SPEC, TINY, RunConfig(devices=2, num_seeds=3, log_every=2))
    record = result.metrics[-1]
    assert len(record["slots"]) == 3
    returns = [s["loss/total"] for s in record["slots"]]
    assert len(set(returns)) == 3  # different seeds, different runs
    # params: [slots, ...] on every device, identical across devices
    leaf = jax.tree.leaves(result.params)[0]
    assert leaf.shape[0] == 3
    copies = parallel.replicas(result.state.agent.params)
    jax.tree.map(np.testing.assert_array_equal, copies[0], copies[1])
    # pooled episode return is the episode-weighted mean of the slots'
    slots = [s for s in record["slots"] if s["episodes"]]
    pooled = sum(s["episode_return"] * s["episodes"] for s in slots) / sum(s["episodes"] for s in slots)
    assert record["episode_return"] == pytest.approx(pooled)


def test_lr_sweep_scales_the_update_size():
    # Two slots with the same seed and learning rates 1e-9 and 1e-3 (no annealing): both start from the same
    # parameters; Adam's step is proportional to lr, so the first slot moves ~1e6 times less than the second.
    config = TINY.replace(anneal_lr=False)
    run_config = RunConfig(devices=2, sweep="lr=1e-9,1e-3")
    result = run(agents.ppo.SPEC, config, run_config)
    prepared = prepare.prepare_run(agents.ppo.SPEC, config, run_config, None, None)  # the run's own init
    start = parallel.first_replica(build.initial_state(prepared, config, run_config, None).agent.params)
    jax.tree.map(lambda x: np.testing.assert_array_equal(x[0], x[1]), start)  # same seed index, same init
    moved = [max(float(np.abs(a[i] - b[i]).max()) for a, b in zip(jax.tree.leaves(result.params),
                                                                  jax.tree.leaves(start))) for i in (0, 1)]
    assert moved[1] > 1e-4
    assert moved[0] < moved[1] * 1e-4


def test_cli_writes_per_seed_metrics(tmp_path, capsys):
    code = train_cli.main(["ppo", "--num-envs", "4", "--num-steps", "16", "--total-timesteps", "128",
                           "--num-minibatches", "2", "--devices", "2", "--num-seeds", "2", "--log-every", "2",
                           "--run-dir", str(tmp_path / "r")])
    assert code == 0
    done = [line for line in capsys.readouterr().out.splitlines() if line.startswith("done:")]
    assert done[0].startswith("done: 256 env steps")  # 2 updates x 64 steps, counted for both seeds
    assert "seed=0: " in done[0] and "seed=1: " in done[0]
    lines = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert len(lines[-1]["slots"]) == 2
    meta = json.loads((tmp_path / "r" / "config.json").read_text())
    assert [s["seed_index"] for s in meta["slots"]] == [0, 1]


@pytest.mark.parametrize("argv, evaluated", [
    (["--sweep", "gamma=0.9,0.99"], "eval gamma=0.9: "),
    # the same bug class on a 2-D mesh of device groups: a second cold process of 17 s, so with the slow runs
    pytest.param(["--devices", "2", "--population-devices", "2", "--search", "lr=1e-3,2e-3,3e-3,4e-3"], "eval best ",
                 marks=pytest.mark.slow),
], ids=["sweep", "population-over-device-groups"])
def test_one_seed_for_many_slots_compiles_without_xla_error_lines(argv, evaluated):
    # Every slot of a one-seed sweep has seed index 0. Folded into the evaluation key under vmap, those equal
    # indices made XLA:CPU's algebraic simplifier give up on the unrolled threefry after 50 passes and print
    # "E... algebraic_simplifier.cc:...] ... likely stuck in a circular simplification loop" twice while compiling
    # (seen on an AVX-512 host). A fresh process, and no compilation cache: a cached program would compile nothing.
    proc = subprocess.run(
        [sys.executable, "-m", "rlpar.train", "ppo", "--env", "CartPole-v1", *argv, "--total-timesteps", "2048",
         "--eval-episodes", "8", "--no-compile-cache"],  # 2 updates, evaluated at the end
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert evaluated in proc.stdout  # the evaluation ran, so its program was compiled
    output = proc.stdout + proc.stderr
    assert not [line for line in output.splitlines() if re.match(r"E\d{4} ", line)], output[-3000:]
