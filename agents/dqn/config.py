"""DQN hyperparameters: one frozen dataclass, derived values as properties, ``validate()`` before any compile."""

from __future__ import annotations

from dataclasses import dataclass

from agents.networks import ACTIVATIONS
from agents.replay import ReplayConfig
from rlpar.agent import config_field


@dataclass(frozen=True)
class DQNConfig(ReplayConfig):
    """Double DQN settings. Every field is also a CLI flag (``buffer_size`` -> ``--buffer-size``). ``seed``,
    ``num_envs``, ``num_steps``, ``total_timesteps`` come from ``rlpar.agent.AgentConfig``; the replay and target
    network fields from ``agents.replay.ReplayConfig``. The defaults solve CartPole-v1 (README, "DQN")."""

    num_envs: int = config_field(8, "parallel environments in total, split evenly over the devices")
    num_steps: int = config_field(32, "environment steps per environment per update (collect length T)")
    total_timesteps: int = config_field(102_400, "environment steps to train for, over all environments")
    buffer_size: int = config_field(100_000, "replay capacity in transitions, over all devices (each keeps "
                                            "buffer_size / devices of its own environments'; the oldest go first)")
    minibatch_size: int = config_field(64, "transitions per gradient step, over all devices (each samples "
                                            "minibatch_size / devices from its own buffer)")
    learning_starts: int = config_field(1_000, "environment steps, over all devices, collected before the first "
                                               "gradient step (the warm-up fill)")
    gradient_steps: int = config_field(128, "gradient steps per update (per collect of num_envs x num_steps "
                                           "environment steps), each on a freshly sampled minibatch")
    tau: float = config_field(1.0, "target network update: target <- tau * online + (1 - tau) * target every "
                                   "target_update_every gradient steps (1: a periodic copy; < 1: Polyak averaging)",
                              sweepable=True)
    target_update_every: int = config_field(128, "gradient steps between target network updates")
    lr: float = config_field(2.3e-3, "Adam learning rate (initial value when annealed)", sweepable=True)
    anneal_lr: bool = config_field(True, "decay the learning rate linearly to 0 over the run's gradient steps")
    max_grad_norm: float = config_field(10.0, "global gradient-norm clip (after averaging over devices)",
                                        sweepable=True)
    gamma: float = config_field(0.99, "discount factor per step", sweepable=True)
    double_q: bool = config_field(True, "double DQN: the online network picks the next action, the target network "
                                        "values it (off: max of the target network)")
    epsilon_start: float = config_field(1.0, "exploration: probability of a uniformly random action at the start",
                                        sweepable=True)
    epsilon_end: float = config_field(0.04, "exploration: the probability after the decay", sweepable=True)
    exploration_fraction: float = config_field(0.1, "fraction of total_timesteps over which epsilon decays "
                                                    "linearly from epsilon_start to epsilon_end", sweepable=True)
    hidden_sizes: tuple[int, ...] = config_field((128, 128), "hidden layer widths of the Q-network MLP")
    activation: str = config_field("relu", "hidden activation: " + ", ".join(ACTIVATIONS))

    @property
    def num_gradient_steps(self) -> int:
        """Gradient steps in a run: ``gradient_steps`` per update from ``first_learning_update`` on."""
        return (self.num_updates - self.first_learning_update + 1) * self.gradient_steps

    def validate(self, num_devices: int = 1) -> "DQNConfig":
        """Raise ``ValueError`` naming the first bad field and what would be accepted; return ``self`` if fine."""
        super().validate(num_devices)
        if not self.lr > 0:
            raise ValueError(f"lr={self.lr!r}: must be > 0")
        if not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm={self.max_grad_norm!r}: must be > 0")
        for name in ("gamma", "epsilon_start", "epsilon_end", "exploration_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value!r}: must be in [0, 1]")
        if not self.hidden_sizes or any((not isinstance(h, int)) or h <= 0 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes={self.hidden_sizes!r}: must be one or more positive integers, e.g. 64,64")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r}: must be one of {', '.join(ACTIVATIONS)}")
        return self
