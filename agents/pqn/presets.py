"""Per-environment PQN presets: changes from the ``PQNConfig`` defaults (which solve CartPole-v1).

The CLI starts from the preset of ``--env`` and applies the flags given on top; from Python use
``PQNConfig.for_env(env_id)``. What each preset reaches is measured in README.md ("PQN").
"""

from __future__ import annotations

PRESETS: dict[str, dict] = {
    "CartPole-v1": {},
    # MinAtar images [10, 10, C] go through the CNN torso (3x3 conv, 16 channels, LayerNorm) chosen by shape.
    "Breakout-MinAtar": dict(
        num_envs=128, num_steps=32, total_timesteps=5_000_000, lr=3e-4, hidden_sizes=(128,), update_epochs=2,
        num_minibatches=8, epsilon_finish=0.01, epsilon_decay=0.1, q_lambda=0.65,
    ),
}
