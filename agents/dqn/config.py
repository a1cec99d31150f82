"""DQN hyperparameters: one frozen dataclass, derived values as properties, ``validate()`` before any compile."""

from __future__ import annotations

from dataclasses import dataclass

from agents import checks
from agents.networks import ACTIVATIONS
from agents.replay import ReplayConfig
from rlpar.core.agent import AgentConfig, config_field


@dataclass(frozen=True)
class DQNConfig(ReplayConfig):
    """Double DQN settings. Every field is also a CLI flag (``buffer_size`` -> ``--buffer-size``). ``seed``,
    ``num_envs``, ``num_steps``, ``total_timesteps`` come from ``rlpar.agent.AgentConfig``; the replay and target
    network fields from ``agents.replay.ReplayConfig``. The defaults solve CartPole-v1 (README, "DQN")."""

    num_envs: int = checks.redeclare(AgentConfig, "num_envs", 8)
    num_steps: int = config_field(32, "environment steps per environment per update (collect length T)")
    total_timesteps: int = checks.redeclare(AgentConfig, "total_timesteps", 102_400)
    buffer_size: int = checks.redeclare(ReplayConfig, "buffer_size", 100_000)
    minibatch_size: int = checks.redeclare(ReplayConfig, "minibatch_size", 64)
    learning_starts: int = checks.redeclare(ReplayConfig, "learning_starts", 1_000)
    gradient_steps: int = checks.redeclare(ReplayConfig, "gradient_steps", 128)
    tau: float = checks.redeclare(ReplayConfig, "tau", 1.0)
    target_update_every: int = checks.redeclare(ReplayConfig, "target_update_every", 128)
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
        checks.positive(self, "lr", "max_grad_norm")
        checks.unit_interval(self, "gamma", "epsilon_start", "epsilon_end", "exploration_fraction")
        checks.network(self)
        return self
