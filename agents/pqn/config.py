"""PQN hyperparameters: one frozen dataclass, derived values as properties, ``validate()`` before any compile."""

from __future__ import annotations

from dataclasses import dataclass

from agents.networks import ACTIVATIONS
from rlpar.agent import AgentConfig, config_field


@dataclass(frozen=True)
class PQNConfig(AgentConfig):
    """PQN settings. Every field is also a CLI flag (``q_lambda`` -> ``--q-lambda``); its help text is below.
    ``seed``, ``num_envs``, ``num_steps`` and ``total_timesteps`` come from ``rlpar.agent.AgentConfig``; the
    defaults here solve CartPole-v1 (see ``agents/pqn/presets.py`` for other envs)."""

    num_envs: int = config_field(32, "parallel environments in total, split evenly over the devices")
    num_steps: int = config_field(32, "environment steps per environment per update (rollout length T)")
    # 640 updates of 32 x 32 steps: a multiple of the CLI's --log-every 10, so one program is compiled
    total_timesteps: int = config_field(655_360, "environment steps to train for, over all environments")
    lr: float = config_field(1e-3, "Adam learning rate (initial value when annealed)", sweepable=True)
    anneal_lr: bool = config_field(True, "decay the learning rate linearly to 0 over training")
    max_grad_norm: float = config_field(10.0, "global gradient-norm clip (after averaging over devices)",
                                        sweepable=True)
    update_epochs: int = config_field(4, "passes over each rollout batch")
    num_minibatches: int = config_field(4, "minibatches per epoch; each device splits its share of the batch this "
                                           "many ways")
    gamma: float = config_field(0.99, "discount factor per step", sweepable=True)
    q_lambda: float = config_field(0.9, "lambda of the Q(lambda) targets (0: one-step Q-learning, 1: returns to "
                                         "the end of the rollout)", sweepable=True)
    epsilon_start: float = config_field(1.0, "exploration rate (probability of a random action) at the start",
                                        sweepable=True)
    epsilon_finish: float = config_field(0.05, "exploration rate after the decay (and of the non-greedy policy "
                                               "export)", sweepable=True)
    epsilon_decay: float = config_field(0.2, "fraction of the updates over which epsilon falls linearly from "
                                             "epsilon_start to epsilon_finish", sweepable=True)
    hidden_sizes: tuple[int, ...] = config_field((128, 128), "hidden layer widths of the Q-network MLP")
    activation: str = config_field("relu", "hidden activation: " + ", ".join(ACTIVATIONS))
    layer_norm: bool = config_field(True, "LayerNorm after every hidden layer (PQN's stabiliser; off only to "
                                          "compare)")

    # ---- derived values (batch_size and num_updates: AgentConfig) ----
    @property
    def num_gradient_steps(self) -> int:
        return self.num_updates * self.update_epochs * self.num_minibatches

    @classmethod
    def for_env(cls, env_id: str) -> "PQNConfig":
        """The defaults with this environment's preset applied (``agents/pqn/presets.py``); plain defaults if none."""
        from agents.pqn.presets import PRESETS

        return cls(**PRESETS.get(env_id, {}))

    def validate(self, num_devices: int = 1) -> "PQNConfig":
        """Raise ``ValueError`` naming the first bad field and what would be accepted; return ``self`` if fine."""
        super().validate(num_devices)
        for name in ("update_epochs", "num_minibatches"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name}={value!r}: must be a positive integer")
        local_batch = (self.num_envs // num_devices) * self.num_steps
        if local_batch % self.num_minibatches:
            raise ValueError(
                f"num_minibatches={self.num_minibatches} does not divide the per-device batch "
                f"(num_envs / devices * num_steps = {self.num_envs // num_devices} * {self.num_steps} = "
                f"{local_batch}): use a divisor of it"
            )
        if not self.lr > 0:
            raise ValueError(f"lr={self.lr!r}: must be > 0")
        if not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm={self.max_grad_norm!r}: must be > 0")
        for name in ("gamma", "q_lambda", "epsilon_start", "epsilon_finish", "epsilon_decay"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value!r}: must be in [0, 1]")
        if not self.hidden_sizes or any((not isinstance(h, int)) or h <= 0 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes={self.hidden_sizes!r}: must be one or more positive integers, e.g. 128,128")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r}: must be one of {', '.join(ACTIVATIONS)}")
        return self
