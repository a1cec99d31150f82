"""One library API: every agent package (each of ``agents.__all__`` with a ``SPEC``, and the example A2C) offers
``train(config=None, env=..., **run_options)``, written from its documentation, and it trains."""

import inspect

import jax

import numpy as np
import pytest

import agents
from examples import a2c
from rlpar.agent import AgentSpec
from rlpar.run import runner

PACKAGES = [getattr(agents, name) for name in agents.__all__
            if isinstance(getattr(getattr(agents, name), "SPEC", None), AgentSpec)] + [a2c]

# A few updates of each, on one device.
TINY = {
    "ppo": agents.PPOConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2, num_minibatches=2, update_epochs=1,
                            hidden_sizes=(8,)),
    "ppo_rnn": agents.RecurrentPPOConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2, num_minibatches=2,
                                         update_epochs=1),
    "pqn": agents.PQNConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2, num_minibatches=2, update_epochs=1,
                            hidden_sizes=(8,)),
    "dqn": agents.DQNConfig(num_envs=4, num_steps=4, total_timesteps=4 * 4 * 3, buffer_size=64, minibatch_size=8,
                            learning_starts=16, hidden_sizes=(8,)),
    "sac": agents.SACConfig(num_envs=4, num_steps=4, total_timesteps=4 * 4 * 3, buffer_size=64, minibatch_size=8,
                            learning_starts=16, hidden_sizes=(8,)),
    "a2c": a2c.A2CConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2),
}


def test_every_agent_of_the_library_is_covered():
    assert sorted(p.SPEC.name for p in PACKAGES) == ["a2c", "dqn", "ppo", "ppo_rnn", "pqn", "sac"]
    assert set(TINY) == {p.SPEC.name for p in PACKAGES}


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.SPEC.name)
def test_train_has_the_one_signature_and_uses_the_preset_or_the_defaults_when_given_no_config(package, monkeypatch):
    parameters = list(inspect.signature(package.train).parameters.values())
    assert [(p.name, p.kind) for p in parameters] == [
        ("config", inspect.Parameter.POSITIONAL_OR_KEYWORD), ("env", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("run_options", inspect.Parameter.VAR_KEYWORD)]
    assert parameters[0].default is None and isinstance(parameters[1].default, str)
    seen = {}
    monkeypatch.setattr(runner, "train", lambda spec, config, env, **options: seen.update(
        spec=spec, config=config, env=env, options=options))
    package.train(devices=1, log_every=5)
    for_env = getattr(package.SPEC.config_cls, "for_env", None)
    assert seen["config"] == (for_env(parameters[1].default) if for_env else package.SPEC.config_cls())
    assert seen["spec"] is package.SPEC and seen["options"] == {"devices": 1, "log_every": 5}


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.SPEC.name)
def test_train_runs_on_a_tiny_budget_and_returns_the_documented_result(package):
    config = TINY[package.SPEC.name]
    result = package.train(config, devices=1, log_every=1, eval_every=0)
    assert isinstance(result, runner.TrainResult)
    assert [r["update"] for r in result.metrics] == list(range(1, config.num_updates + 1))
    # .state: the whole per-device training state, every leaf [D, ...]; .params: device 0's parameters on the host
    assert all(np.shape(leaf)[0] == 1 for leaf in jax.tree.leaves(result.state))
    params = getattr(result.state.agent, "params", result.state.agent)
    jax.tree.map(lambda host, device: np.testing.assert_array_equal(host, np.asarray(device)[0]),
                               result.params, params)
    assert result.compile_s > 0
