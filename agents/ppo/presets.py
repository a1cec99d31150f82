"""Per-environment PPO presets: changes from the ``PPOConfig`` defaults that make each env learn on a 2-core CPU.

The CLI starts from the preset of ``--env`` and applies the flags given on top; from Python use
``PPOConfig.for_env(env_id)``. The returns each preset reaches are measured in README.md ("Presets").
Environments without an entry use the plain defaults (tuned for CartPole-v1).
"""

from __future__ import annotations

PRESETS: dict[str, dict] = {
    "CartPole-v1": {},
    "Acrobot-v1": dict(total_timesteps=500_000),
    "MountainCar-v0": dict(
        num_envs=16, num_steps=64, total_timesteps=2_000_000, normalize_obs=True, gae_lambda=0.98, ent_coef=0.0,
    ),
    "Pendulum-v1": dict(
        num_envs=16, num_steps=128, total_timesteps=400_000, update_epochs=10, num_minibatches=32, gamma=0.9,
        lr=1e-3, ent_coef=0.0,
    ),
    "MountainCarContinuous-v0": dict(
        num_envs=16, num_steps=64, total_timesteps=1_000_000, normalize_obs=True, gamma=0.999, ent_coef=0.001,
    ),
    "Breakout-MinAtar": dict(
        num_envs=64, num_steps=128, total_timesteps=2_000_000, lr=5e-4, hidden_sizes=(128,), activation="relu",
    ),
}
