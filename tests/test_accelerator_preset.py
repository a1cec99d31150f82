"""An env's accelerator preset (``agents/ppo/presets.py``'s ``ACCELERATOR``): ``PPOConfig.for_env`` takes it off the
CPU, keeps the CPU preset on it, and asks JAX for its backend only for an env that has one."""

import jax
import pytest

from agents.ppo import PPOConfig
from agents.ppo.presets import ACCELERATOR, PRESETS


def test_the_platform_picks_between_the_cpu_and_the_accelerator_preset():
    cpu = PPOConfig.for_env("Breakout-MinAtar", platform="cpu")
    assert cpu == PPOConfig(**PRESETS["Breakout-MinAtar"])
    for platform in ("tpu", "gpu"):
        chip = PPOConfig.for_env("Breakout-MinAtar", platform=platform)
        assert chip == PPOConfig(**ACCELERATOR["Breakout-MinAtar"])
        assert (chip.num_envs, chip.num_steps, chip.lr, chip.ent_coef) == (512, 32, 1e-3, 0.03)
        # the learning settings the CPU preset measured stay: the batch's shape, the step size and the entropy move
        assert (chip.gamma, chip.hidden_sizes, chip.torso, chip.anneal_lr) == (cpu.gamma, cpu.hidden_sizes, cpu.torso,
                                                                              cpu.anneal_lr)
        assert chip.total_timesteps == cpu.total_timesteps


def test_by_default_jax_s_backend_decides_and_here_it_is_the_cpu():
    assert jax.default_backend() == "cpu"
    assert PPOConfig.for_env("Breakout-MinAtar") == PPOConfig.for_env("Breakout-MinAtar", platform="cpu")


def test_an_env_without_an_accelerator_preset_never_asks_for_the_backend(monkeypatch):
    def no_backend():
        raise AssertionError("asked for the backend")

    monkeypatch.setattr(jax, "default_backend", no_backend)
    assert PPOConfig.for_env("CartPole-v1") == PPOConfig(**PRESETS["CartPole-v1"])
    assert PPOConfig.for_env("CartPole-v1", platform="tpu") == PPOConfig(**PRESETS["CartPole-v1"])
    with pytest.raises(AssertionError, match="asked for the backend"):
        PPOConfig.for_env("Breakout-MinAtar")


def test_every_accelerator_preset_is_a_valid_config():
    for env_id, preset in ACCELERATOR.items():
        PPOConfig(**preset).validate()
        assert env_id in PRESETS  # an accelerator preset is the CPU one's counterpart
