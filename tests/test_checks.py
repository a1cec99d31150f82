"""The shared config checks (agents.checks): each names the field, its value and what is accepted."""

import dataclasses

import pytest

from agents import checks
from agents.dqn import DQNConfig
from agents.pqn import PQNConfig
from agents.replay import ReplayConfig


def test_redeclared_fields_keep_the_base_help_and_change_only_the_default():
    fields = {f.name: f for f in dataclasses.fields(DQNConfig)}
    base = {f.name: f for f in dataclasses.fields(ReplayConfig)}
    assert fields["minibatch_size"].default == 64 != base["minibatch_size"].default
    assert fields["minibatch_size"].metadata == base["minibatch_size"].metadata
    assert fields["tau"].metadata["sweepable"] is True


@pytest.mark.parametrize("change, message", [
    (dict(update_epochs=0), "update_epochs=0: must be a positive integer"),
    (dict(num_minibatches=3), "num_minibatches=3 does not divide the per-device batch (num_envs / devices * num_steps"
                              " = 32 * 32 = 1024): use a divisor of it"),
    (dict(lr=0.0), "lr=0.0: must be > 0"),
    (dict(q_lambda=1.5), "q_lambda=1.5: must be in [0, 1]"),
    (dict(hidden_sizes=(64, 0)), "hidden_sizes=(64, 0): must be one or more positive integers, e.g. 128,128"),
    (dict(activation="gelu2"), "activation='gelu2': must be one of"),
])
def test_each_check_names_the_field_and_what_is_accepted(change, message):
    with pytest.raises(ValueError) as err:
        PQNConfig(**change).validate()
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_redeclare_refuses_a_field_without_help():
    @dataclasses.dataclass(frozen=True)
    class Plain:
        x: int = 1

    with pytest.raises(TypeError, match="Plain.x is not a config_field"):
        checks.redeclare(Plain, "x", 2)


def test_every_ppo_preset_is_a_valid_config():
    from agents.ppo import PPOConfig
    from agents.ppo.presets import PRESETS

    for env_id in PRESETS:
        PPOConfig.for_env(env_id).validate(1)
    assert PPOConfig.for_env("Breakout-MinAtar").torso == "mlp"
    assert PPOConfig.for_env("SpaceInvaders-MinAtar").torso == "auto"
