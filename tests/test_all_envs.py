"""Every gymnax 1.0 environment that needs no download trains through the CLI for a few updates on 2 devices."""

import json

import numpy as np
import pytest

import envs
from rlpar.tools import train as train_cli

# MNISTBandit-bsuite downloads MNIST on construction: not usable offline, so not part of the supported set.
NEEDS_DOWNLOAD = {"MNISTBandit-bsuite"}
GYMNAX_IDS = [i for i in envs.env_ids() if not i.startswith("Probe-") and i not in NEEDS_DOWNLOAD]


def test_the_supported_set_is_all_of_gymnax_but_mnist():
    assert len(GYMNAX_IDS) == 25


@pytest.mark.parametrize("env_id", GYMNAX_IDS)
@pytest.mark.slow
def test_env_trains_through_the_cli(env_id, tmp_path):
    code = train_cli.main([
        "ppo", "--env", env_id, "--devices", "2", "--num-envs", "4", "--num-steps", "8", "--total-timesteps", "64",
        "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "16", "--log-every", "2",
        "--run-dir", str(tmp_path),
    ])
    assert code == 0
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["env_steps"] == 64
    assert np.isfinite(records[-1]["loss/total"])
