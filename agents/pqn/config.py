"""PQN hyperparameters: one frozen dataclass, derived values as properties, ``validate()`` before any compile."""

from __future__ import annotations

from dataclasses import dataclass

from agents import checks
from agents.networks import ACTIVATIONS
from rlpar.core.agent import AgentConfig, config_field


@dataclass(frozen=True)
class PQNConfig(AgentConfig):
    """PQN settings. Every field is also a CLI flag (``q_lambda`` -> ``--q-lambda``); its help text is below.
    ``seed``, ``num_envs``, ``num_steps`` and ``total_timesteps`` come from ``rlpar.agent.AgentConfig``; the
    defaults here solve CartPole-v1 (see ``agents/pqn/presets.py`` for other envs)."""

    num_envs: int = checks.redeclare(AgentConfig, "num_envs", 32)
    num_steps: int = checks.redeclare(AgentConfig, "num_steps", 32)
    # 640 updates of 32 x 32 steps: a multiple of the CLI's --log-every 10, so one program is compiled
    total_timesteps: int = checks.redeclare(AgentConfig, "total_timesteps", 655_360)
    lr: float = config_field(1e-3, "Adam learning rate (initial value when annealed)", sweepable=True)
    anneal_lr: bool = config_field(True, "decay the learning rate linearly to 0 over training")
    max_grad_norm: float = config_field(10.0, "global gradient-norm clip (after averaging over devices)",
                                        sweepable=True)
    update_epochs: int = config_field(4, "passes over each rollout batch")
    num_minibatches: int = config_field(4, "minibatches per epoch; each device splits its share of the batch this "
                                           "many ways")
    shuffle_block: int = config_field(0, "rows of one time step that move together when a batch is shuffled into "
                                         "minibatches: 1 single rows, B blocks of B rows, 0 the backend's choice "
                                         "(single rows on a CPU, blocks on an accelerator)")
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
        checks.minibatches(self, num_devices)
        checks.shuffle_block(self, num_devices)
        checks.positive(self, "lr", "max_grad_norm")
        checks.unit_interval(self, "gamma", "q_lambda", "epsilon_start", "epsilon_finish", "epsilon_decay")
        checks.network(self)
        return self
