"""Every agent on the contract searches and runs PBT over the fields its config declares sweepable, with no
agent-specific code in the engine: a PBT round copies the whole agent state (replay buffers, recurrent and
normalisation state included) from one member to another (that it leaves the environments alone is checked on a
hand-made state in tests/test_population.py: here both members share seed index 0, so their environments match)."""

import json

import numpy as np
import pytest

from rlpar.run import rundir
from rlpar.run.checkpoint import Checkpoints
from rlpar.tools import train as train_cli

# One device, 2 members drawn from two fields, 4 updates in chunks of 3 and 1, a PBT round after update 3 (a member
# copies the other: both have finished episodes by then, so both have a fitness), a checkpoint right after it.
COMMON = ["--population", "2", "--pbt", "--pbt-interval", "3", "--log-every", "3",
          "--checkpoint-every", "3", "--eval-every", "0"]
REPLAY = ["--num-envs", "4", "--num-steps", "4", "--total-timesteps", str(4 * 4 * 4), "--buffer-size", "64",
          "--minibatch-size", "8", "--learning-starts", "16", "--hidden-sizes", "16"]


def _with(flags: list[str], **values) -> list[str]:
    """``flags`` with the values of some replaced (``num_steps=70`` for ``--num-steps``): a flag is given once."""
    names = {"--" + name.replace("_", "-"): str(value) for name, value in values.items()}
    return [names.get(flags[i - 1], flag) if i else flag for i, flag in enumerate(flags)]


ON_POLICY = ["--env", "CartPole-v1", "--num-envs", "4", "--num-steps", "8", "--total-timesteps", str(4 * 8 * 4)]
FAMILIES = {
    "ppo_rnn": ["ppo_rnn", *ON_POLICY, "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "16",
                "--gru-size", "8", "--search", "lr=log:1e-4..1e-2 gae_lambda=0.8..1"],
    "pqn": ["pqn", "--env", "CartPole-v1", "--num-envs", "4", "--num-steps", "16", "--total-timesteps",
            str(4 * 16 * 4), "--num-minibatches", "2", "--update-epochs", "1", "--hidden-sizes", "16",
            "--search", "lr=log:1e-4..1e-2 q_lambda=0.5..0.9"],
    "dqn": ["dqn", "--env", "CartPole-v1", *REPLAY, "--search", "lr=log:1e-4..1e-2 tau=0.5..1"],
    # Pendulum's episodes last 200 steps: 70 per update, so each member has finished one (a fitness) by the round
    "sac": ["sac", "--env", "Pendulum-v1", *_with(REPLAY, num_steps=70, total_timesteps=4 * 70 * 4, buffer_size=512),
            "--search", "actor_lr=log:1e-4..1e-2 gamma=0.9..0.99"],
    "a2c": ["examples.a2c:SPEC", *ON_POLICY, "--hidden-sizes", "16", "--search", "lr=log:1e-4..1e-2 ent_coef=0..0.05"],
}


def _leaves(tree, prefix=""):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _leaves(value, f"{prefix}/{key}")
    elif isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            yield from _leaves(value, f"{prefix}/{i}")
    elif tree is not None:
        yield prefix, np.asarray(tree)


# The same on 2 devices as 2 groups of 1 (--population-devices 2): each member on a device of its own, so the copy
# crosses devices (the round gathers every member's agent state from both groups).
LAYOUTS = {"one device": ["--devices", "1"], "2x1": ["--devices", "2", "--population-devices", "2"]}


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_pbt_round_copies_the_agent_state_of_any_agent(family, layout, tmp_path):
    run_dir = tmp_path / "run"
    assert train_cli.main([*FAMILIES[family], *COMMON, *LAYOUTS[layout], "--run-dir", str(run_dir)]) == 0
    records = [json.loads(line) for line in (run_dir / rundir.METRICS).read_text().splitlines()]
    (round_,) = [r for record in records for r in record.get("pbt", [])]
    assert round_["update"] == 3
    (copy,) = [i for i, p in enumerate(round_["parent"]) if p != i]
    parent = round_["parent"][copy]
    state = Checkpoints(run_dir / rundir.CHECKPOINTS).restore(3).state  # right after the round
    agent = dict(_leaves(state["agent"]))
    assert agent
    for name, leaf in agent.items():  # [devices, members, ...]: every leaf of the copy is its parent's
        np.testing.assert_array_equal(leaf[:, copy], leaf[:, parent], err_msg=name)
    values = {k: v[0] for k, v in dict(_leaves(state["population"]["hparams"])).items()}
    for name, logged in round_["hparams"].items():  # the state holds the values the round logged
        np.testing.assert_allclose(values["/" + name], logged, rtol=1e-7)
        was = round_["hparams"][name][parent]
        assert logged[copy] != was  # perturbed (x0.8 / x1.2) or redrawn
