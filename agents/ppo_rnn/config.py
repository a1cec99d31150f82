"""Recurrent PPO settings: every ``PPOConfig`` field plus the GRU size; minibatches are whole sequences."""

from __future__ import annotations

from dataclasses import dataclass

from agents import checks
from agents.ppo.config import PPOConfig
from rlpar.core.agent import config_field


@dataclass(frozen=True)
class RecurrentPPOConfig(PPOConfig):
    """PPO with a GRU policy. Minibatches split the environments (never time), so each minibatch holds whole
    ``num_steps``-long sequences replayed from the hidden state the rollout started with."""

    gru_size: int = config_field(64, "GRU hidden-state size")
    hidden_sizes: tuple[int, ...] = config_field((64,), "hidden layer widths of the actor and critic heads after the "
                                                        "GRU")

    @classmethod
    def for_env(cls, env_id: str) -> "RecurrentPPOConfig":
        return cls()  # no per-env presets yet

    def validate(self, num_devices: int = 1) -> "RecurrentPPOConfig":
        super().validate(num_devices)
        checks.positive_ints(self, "gru_size")
        local_envs = self.num_envs // num_devices
        if local_envs % self.num_minibatches:
            raise ValueError(
                f"num_minibatches={self.num_minibatches} does not divide the environments per device "
                f"({local_envs}): recurrent minibatches are whole sequences, so use a divisor of {local_envs}"
            )
        if self.shuffle_block:
            raise ValueError(f"shuffle_block={self.shuffle_block}: ppo_rnn's minibatches are whole sequences of "
                             f"environments, not rows; leave it 0")
        if self.normalize_obs:
            raise ValueError("normalize_obs=True is not supported by ppo_rnn yet: use ppo, or drop the flag")
        return self
