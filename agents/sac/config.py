"""SAC hyperparameters: one frozen dataclass, derived values as properties, ``validate()`` before any compile."""

from __future__ import annotations

from dataclasses import dataclass

from agents.networks import ACTIVATIONS
from agents.replay import ReplayConfig
from rlpar.agent import config_field


@dataclass(frozen=True)
class SACConfig(ReplayConfig):
    """Soft actor-critic settings. Every field is also a CLI flag (``actor_lr`` -> ``--actor-lr``). ``seed``,
    ``num_envs``, ``num_steps``, ``total_timesteps`` come from ``rlpar.agent.AgentConfig``; the replay and target
    network fields from ``agents.replay.ReplayConfig``. The defaults solve Pendulum-v1 (README, "SAC")."""

    num_envs: int = config_field(8, "parallel environments in total, split evenly over the devices")
    num_steps: int = config_field(8, "environment steps per environment per update (collect length T)")
    total_timesteps: int = config_field(20_480, "environment steps to train for, over all environments")
    buffer_size: int = config_field(100_000, "replay capacity in transitions, over all devices (each keeps "
                                             "buffer_size / devices of its own environments'; the oldest go first)")
    minibatch_size: int = config_field(128, "transitions per gradient step, over all devices (each samples "
                                            "minibatch_size / devices from its own buffer)")
    learning_starts: int = config_field(1_024, "environment steps, over all devices, collected with uniformly "
                                               "random actions before the first gradient step (the warm-up fill)")
    gradient_steps: int = config_field(64, "gradient steps per update (per collect of num_envs x num_steps "
                                           "environment steps), each on a freshly sampled minibatch")
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
        for name in ("actor_lr", "critic_lr", "alpha_lr", "init_alpha"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name}={value!r}: must be > 0")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma={self.gamma!r}: must be in [0, 1]")
        if not abs(self.target_entropy_scale) < float("inf"):
            raise ValueError(f"target_entropy_scale={self.target_entropy_scale!r}: must be a finite number")
        if not self.hidden_sizes or any((not isinstance(h, int)) or h <= 0 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes={self.hidden_sizes!r}: must be one or more positive integers, "
                             "e.g. 64,64")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r}: must be one of {', '.join(ACTIVATIONS)}")
        return self
