"""Every gymnax 1.0 environment that needs no download trains through the CLI for a few updates on 2 devices."""

import json

import numpy as np
import pytest

import envs
from rlpar.tools import train as train_cli

# MNISTBandit-bsuite downloads MNIST on construction: not usable offline, so not part of the supported set.
NEEDS_DOWNLOAD = {"MNISTBandit-bsuite"}
GYMNAX_IDS = [i for i in envs.env_ids() if not i.startswith("Probe-") and i not in NEEDS_DOWNLOAD]
# The greedy evaluation's program, half of each run's compile, for one env of each family (classic control, MinAtar,
# bsuite, misc); the others train with --eval-every 0. Every agent's evaluation is tested in tests/test_eval.py.
EVALUATED = {"Acrobot-v1", "Breakout-MinAtar", "Catch-bsuite", "MetaMaze-misc"}


def test_the_supported_set_is_all_of_gymnax_but_mnist():
    assert len(GYMNAX_IDS) == 25 and EVALUATED <= set(GYMNAX_IDS)


@pytest.mark.parametrize("env_id", GYMNAX_IDS)
@pytest.mark.slow
def test_env_trains_through_the_cli(env_id, tmp_path):
    code = train_cli.main([
        "ppo", "--env", env_id, "--devices", "2", "--num-envs", "4", "--num-steps", "8", "--total-timesteps", "64",
        "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "16", "--log-every", "2",
        "--run-dir", str(tmp_path), *([] if env_id in EVALUATED else ["--eval-every", "0"]),
    ])
    assert code == 0
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["env_steps"] == 64
    assert np.isfinite(records[-1]["loss/total"])
    assert ("eval/episode_return" in records[-1]) == (env_id in EVALUATED)
