"""Run dirs written by earlier code still resume and still load for evaluation.

``tests/data/run_5242f60`` was written by ``python -m rlpar.train ppo --env CartPole-v1 --total-timesteps 256
--num-envs 4 --num-steps 16 --num-minibatches 2 --update-epochs 1 --devices 1 --log-every 2 --checkpoint-every 2``
at commit 5242f60 (before the package layout of rlpar.core / rlpar.run / rlpar.tools), then its checkpoint of update 4
removed, so that a resume has updates left to run. Its ``config.json`` stores only agent names and module paths of
``agents`` (never an ``rlpar`` module), and the checkpoints hold arrays only.
"""

import json
import shutil
from pathlib import Path

import jax
import numpy as np

from rlpar import train as train_cli
from rlpar.evaluate import load_policy

OLD_RUN = Path(__file__).with_name("data") / "run_5242f60"


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_run_dir_written_before_resumes(tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(OLD_RUN, run_dir)
    before = _records(run_dir)
    assert train_cli.main(["--resume", str(run_dir)]) == 0
    assert "resumed from update 2" in capsys.readouterr().out
    after = _records(run_dir)
    assert [r["update"] for r in after] == [2, 4]
    assert after[0] == before[0]  # kept as written; update 4 run again from the checkpoint of update 2
    assert set(after[1]) == set(before[1]) and after[1]["env_steps"] == 256
    assert np.isfinite(after[1]["loss/total"])


def test_a_run_dir_written_before_loads_for_evaluation():
    policy = load_policy(OLD_RUN, num_envs=3)
    assert policy.env_id == "CartPole-v1" and policy.update == 2 and policy.slot == 0
    action, _ = policy.fn(policy.initial_carry(3), jax.numpy.zeros((3, 4)), jax.random.key(0))
    assert action.shape == (3,) and set(np.asarray(action).tolist()) <= {0, 1}
