"""PPO hyperparameters: one frozen dataclass, derived values as properties, ``validate()`` before any compile."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from agents.ppo.network import ACTIVATIONS


def _f(default, help: str):  # noqa: A002 - the field's documentation, shown by the CLI's --help
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class PPOConfig:
    """PPO settings. Every field is also a CLI flag (``num_envs`` -> ``--num-envs``); its help text is below."""

    seed: int = _f(0, "PRNG seed; same seed and device count give identical results")
    num_envs: int = _f(8, "parallel environments in total, split evenly over the devices")
    num_steps: int = _f(128, "environment steps per environment per update (rollout length T)")
    total_timesteps: int = _f(1_000_000, "environment steps to train for, over all environments")
    lr: float = _f(2.5e-4, "Adam learning rate (initial value when annealed)")
    anneal_lr: bool = _f(True, "decay the learning rate linearly to 0 over training")
    update_epochs: int = _f(4, "passes over each rollout batch")
    num_minibatches: int = _f(4, "minibatches per epoch; each device splits its share of the batch this many ways")
    gamma: float = _f(0.99, "discount factor per step")
    gae_lambda: float = _f(0.95, "GAE lambda (0: one-step TD, 1: Monte Carlo)")
    clip_eps: float = _f(0.2, "PPO ratio clip epsilon (also the value clip range when clip_value is on)")
    clip_value: bool = _f(True, "clip the critic's change per update to +-clip_eps")
    ent_coef: float = _f(0.01, "entropy bonus coefficient")
    vf_coef: float = _f(0.5, "critic loss coefficient")
    max_grad_norm: float = _f(0.5, "global gradient-norm clip (after averaging over devices)")
    normalize_advantages: bool = _f(True, "normalise advantages per minibatch, statistics over all devices")
    normalize_obs: bool = _f(False, "normalise observations by running mean/std, statistics synced over devices")
    hidden_sizes: tuple[int, ...] = _f((64, 64), "hidden layer widths of the actor and critic MLPs")
    activation: str = _f("tanh", "hidden activation: " + ", ".join(ACTIVATIONS))

    # ---- derived values ----
    @property
    def batch_size(self) -> int:
        """Environment steps per update, over all devices."""
        return self.num_envs * self.num_steps

    @property
    def minibatch_size(self) -> int:
        """Transitions per gradient step, over all devices."""
        return self.batch_size // self.num_minibatches

    @property
    def num_updates(self) -> int:
        """Updates (collect + learn) in a run; ``total_timesteps`` rounded down to whole rollouts."""
        return self.total_timesteps // self.batch_size

    @property
    def num_gradient_steps(self) -> int:
        return self.num_updates * self.update_epochs * self.num_minibatches

    @classmethod
    def for_env(cls, env_id: str) -> "PPOConfig":
        """The defaults with this environment's preset applied (``agents/ppo/presets.py``); plain defaults if none."""
        from agents.ppo.presets import PRESETS

        return cls(**PRESETS.get(env_id, {}))

    def replace(self, **changes) -> "PPOConfig":
        return dataclasses.replace(self, **changes)

    def validate(self, num_devices: int = 1) -> "PPOConfig":
        """Raise ``ValueError`` naming the first bad field and what would be accepted; return ``self`` if fine."""
        for name in ("num_envs", "num_steps", "total_timesteps", "update_epochs", "num_minibatches"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name}={value!r}: must be a positive integer")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed={self.seed!r}: must be a non-negative integer")
        if self.num_envs % num_devices:
            raise ValueError(
                f"num_envs={self.num_envs} is not divisible by the device count {num_devices}: "
                f"use a multiple of {num_devices} (e.g. {num_devices * max(1, self.num_envs // num_devices)})"
            )
        local_batch = (self.num_envs // num_devices) * self.num_steps
        if local_batch % self.num_minibatches:
            raise ValueError(
                f"num_minibatches={self.num_minibatches} does not divide the per-device batch "
                f"(num_envs / devices * num_steps = {self.num_envs // num_devices} * {self.num_steps} = {local_batch}): "
                "use a divisor of it"
            )
        if self.total_timesteps < self.batch_size:
            raise ValueError(
                f"total_timesteps={self.total_timesteps} is smaller than one rollout "
                f"(num_envs * num_steps = {self.batch_size}): use at least {self.batch_size}"
            )
        if not self.lr > 0:
            raise ValueError(f"lr={self.lr!r}: must be > 0")
        for name in ("gamma", "gae_lambda"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value!r}: must be in [0, 1]")
        for name in ("clip_eps", "ent_coef", "vf_coef", "max_grad_norm"):
            value = getattr(self, name)
            if not value >= 0:
                raise ValueError(f"{name}={value!r}: must be >= 0")
        if not self.hidden_sizes or any((not isinstance(h, int)) or h <= 0 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes={self.hidden_sizes!r}: must be one or more positive integers, e.g. 64,64")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation={self.activation!r}: must be one of {', '.join(ACTIVATIONS)}")
        return self
