"""PPO hyperparameters: one frozen dataclass, derived values as properties, ``validate()`` before any compile."""

from __future__ import annotations

from dataclasses import dataclass

from agents import checks
from agents.networks import ACTIVATIONS, TORSOS
from rlpar.core.agent import AgentConfig, config_field


@dataclass(frozen=True)
class PPOConfig(AgentConfig):
    """PPO settings. Every field is also a CLI flag (``num_envs`` -> ``--num-envs``); its help text is below.
    ``seed``, ``num_envs``, ``num_steps`` and ``total_timesteps`` come from ``rlpar.agent.AgentConfig``."""

    lr: float = config_field(2.5e-4, "Adam learning rate (initial value when annealed)", sweepable=True)
    anneal_lr: bool = config_field(True, "decay the learning rate linearly to 0 over training")
    update_epochs: int = config_field(4, "passes over each rollout batch")
    num_minibatches: int = config_field(4, "minibatches per epoch; each device splits its share of the batch this "
                                           "many ways")
    shuffle_block: int = config_field(0, "rows of one time step that move together when a batch is shuffled into "
                                         "minibatches: 1 single rows (as rejax and PureJaxRL sample), B blocks of B "
                                         "rows, 0 the backend's choice (single rows on a CPU, blocks on an "
                                         "accelerator)")
    gamma: float = config_field(0.99, "discount factor per step", sweepable=True)
    gae_lambda: float = config_field(0.95, "GAE lambda (0: one-step TD, 1: Monte Carlo)", sweepable=True)
    clip_eps: float = config_field(0.2, "PPO ratio clip epsilon (also the value clip range when clip_value is on)",
                                   sweepable=True)
    clip_value: bool = config_field(True, "clip the critic's change per update to +-clip_eps")
    ent_coef: float = config_field(0.01, "entropy bonus coefficient", sweepable=True)
    vf_coef: float = config_field(0.5, "critic loss coefficient", sweepable=True)
    max_grad_norm: float = config_field(0.5, "global gradient-norm clip (after averaging over devices)",
                                        sweepable=True)
    normalize_advantages: bool = config_field(True, "normalise advantages per minibatch, statistics over all devices")
    normalize_obs: bool = config_field(False, "normalise observations by running mean/std, statistics synced over "
                                              "devices")
    hidden_sizes: tuple[int, ...] = config_field((64, 64), "hidden layer widths of the actor and critic MLPs")
    activation: str = config_field("tanh", "hidden activation: " + ", ".join(ACTIVATIONS))
    torso: str = config_field("auto", "what reads image observations [H, W, C]: auto (a 3x3 convolution, then the "
                                      "MLP) or mlp (the MLP on the flattened image, as gymnax-blines and rejax)")

    # ---- derived values (batch_size and num_updates: AgentConfig) ----
    @property
    def num_gradient_steps(self) -> int:
        return self.num_updates * self.update_epochs * self.num_minibatches

    @classmethod
    def for_env(cls, env_id: str, platform: str | None = None) -> "PPOConfig":
        """The defaults with this environment's preset applied (``agents/ppo/presets.py``); plain defaults if none.
        Where the env has an accelerator preset (``ACCELERATOR``), ``platform`` (``"cpu"``, ``"tpu"``, ``"gpu"``;
        default: JAX's default backend, asked only then) picks between the two."""
        from agents.ppo.presets import ACCELERATOR, PRESETS

        if env_id in ACCELERATOR:
            if platform is None:
                import jax

                platform = jax.default_backend()
            if platform != "cpu":
                return cls(**ACCELERATOR[env_id])
        return cls(**PRESETS.get(env_id, {}))

    def validate(self, num_devices: int = 1) -> "PPOConfig":
        """Raise ``ValueError`` naming the first bad field and what would be accepted; return ``self`` if fine."""
        super().validate(num_devices)
        checks.minibatches(self, num_devices)
        checks.shuffle_block(self, num_devices)
        checks.positive(self, "lr")
        checks.unit_interval(self, "gamma", "gae_lambda")
        checks.non_negative(self, "clip_eps", "ent_coef", "vf_coef", "max_grad_norm")
        checks.network(self)
        if self.torso not in TORSOS:
            raise ValueError(f"torso={self.torso!r}: must be one of {', '.join(TORSOS)}")
        return self
