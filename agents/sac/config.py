"""SAC hyperparameters: one frozen dataclass, derived values as properties, ``validate()`` before any compile."""

from __future__ import annotations

from dataclasses import dataclass

from agents import checks
from agents.networks import ACTIVATIONS
from agents.replay import ReplayConfig
from rlpar.core.agent import AgentConfig, config_field


@dataclass(frozen=True)
class SACConfig(ReplayConfig):
    """Soft actor-critic settings. Every field is also a CLI flag (``actor_lr`` -> ``--actor-lr``). ``seed``,
    ``num_envs``, ``num_steps``, ``total_timesteps`` come from ``rlpar.agent.AgentConfig``; the replay and target
    network fields from ``agents.replay.ReplayConfig``. The defaults solve Pendulum-v1 (README, "SAC")."""

    num_envs: int = checks.redeclare(AgentConfig, "num_envs", 8)
    num_steps: int = config_field(8, "environment steps per environment per update (collect length T)")
    total_timesteps: int = checks.redeclare(AgentConfig, "total_timesteps", 20_480)
    buffer_size: int = checks.redeclare(ReplayConfig, "buffer_size", 100_000)
    minibatch_size: int = checks.redeclare(ReplayConfig, "minibatch_size", 128)
    learning_starts: int = config_field(1_024, "environment steps, over all devices, collected with uniformly "
                                               "random actions before the first gradient step (the warm-up fill)")
    gradient_steps: int = checks.redeclare(ReplayConfig, "gradient_steps", 64)
    tau: float = config_field(0.005, "target critics: target <- tau * online + (1 - tau) * target every "
                                     "target_update_every gradient steps (Polyak averaging; 1: a copy)",
                              sweepable=True)
    target_update_every: int = config_field(1, "gradient steps between target critic updates")
    actor_lr: float = config_field(3e-4, "Adam learning rate of the actor", sweepable=True)
    critic_lr: float = config_field(1e-3, "Adam learning rate of the twin critics", sweepable=True)
    alpha_lr: float = config_field(1e-3, "Adam learning rate of the temperature (its log)", sweepable=True)
    gamma: float = config_field(0.99, "discount factor per step", sweepable=True)
    init_alpha: float = config_field(1.0, "initial entropy temperature alpha (> 0)", sweepable=True)
    learn_alpha: bool = config_field(True, "learn alpha towards the target entropy (off: alpha stays init_alpha)")
    target_entropy_scale: float = config_field(-1.0, "target entropy per action dimension: the temperature is "
                                                     "tuned towards target_entropy_scale * action_dim nats, the "
                                                     "policy's entropy in the env's own action units",
                                               sweepable=True)
    hidden_sizes: tuple[int, ...] = config_field((64, 64), "hidden layer widths of the actor and each critic MLP")
    activation: str = config_field("relu", "hidden activation: " + ", ".join(ACTIVATIONS))

    def validate(self, num_devices: int = 1) -> "SACConfig":
        """Raise ``ValueError`` naming the first bad field and what would be accepted; return ``self`` if fine."""
        super().validate(num_devices)
        checks.positive(self, "actor_lr", "critic_lr", "alpha_lr", "init_alpha")
        checks.unit_interval(self, "gamma")
        if not abs(self.target_entropy_scale) < float("inf"):
            raise ValueError(f"target_entropy_scale={self.target_entropy_scale!r}: must be a finite number")
        checks.network(self)
        return self
