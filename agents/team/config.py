"""IPPO and MAPPO settings: every ``PPOConfig`` field (the same loss, GAE and optimizer) plus the team's own."""

from __future__ import annotations

from dataclasses import dataclass

from agents import checks
from agents.ppo.config import PPOConfig
from rlpar.core.agent import config_field

ACTION_MASKS = ("auto", "on", "off")


@dataclass(frozen=True)
class TeamConfig(PPOConfig):
    """PPO for a team: one network shared by every agent, which acts on its own observation. ``num_envs`` and
    ``total_timesteps`` count team steps (one step of an env moves every agent), as JaxMARL counts them; each update
    learns from ``num_envs * num_steps * agents`` agent steps."""

    agent_id: bool = config_field(False, "append the agent's one-hot id to the actor's input (and, for mappo, to the "
                                         "critic's world state), so the shared network can act differently per agent")
    action_mask: str = config_field("auto", "respect the env's action masks when sampling and acting greedily: auto "
                                            "(where the env has them), on (refuse an env without), off (ignore them)")
    gru_size: int = config_field(0, "0: feed-forward actor and critic; N > 0: a GRU of N units after the first layer "
                                    "of each, its state reset where an episode starts (minibatches then split "
                                    "environments, never time)")
    reward_shaping_horizon: int = config_field(0, "team steps (summed over envs, as total_timesteps) over which the "
                                                  "env's shaped reward (Overcooked's) is added to the learning reward,"
                                                  " its weight annealed linearly from 1 to 0, as JaxMARL's "
                                                  "REW_SHAPING_HORIZON; the reported returns stay the env's own; "
                                                  "0: no shaping")

    @classmethod
    def for_env(cls, env_id: str) -> "TeamConfig":
        """The defaults with this environment's preset applied (``agents/team/presets.py``); plain defaults if none."""
        from agents.team.presets import preset

        return cls(**preset(cls, env_id))

    def validate(self, num_devices: int = 1) -> "TeamConfig":
        super().validate(num_devices)
        if self.action_mask not in ACTION_MASKS:
            raise ValueError(f"action_mask={self.action_mask!r}: must be one of {', '.join(ACTION_MASKS)}")
        if not isinstance(self.gru_size, int) or isinstance(self.gru_size, bool) or self.gru_size < 0:
            raise ValueError(f"gru_size={self.gru_size!r}: must be 0 (feed-forward) or a positive integer")
        if self.normalize_obs:
            raise ValueError("normalize_obs=True is not supported by the team agents (ippo, mappo): drop the flag")
        if self.gru_size and self.shuffle_block:
            raise ValueError(f"shuffle_block={self.shuffle_block}: with gru_size the minibatches are whole sequences "
                             f"of environments, not rows; leave it 0")
        if self.gru_size and (self.num_envs // num_devices) % self.num_minibatches:
            local_envs = self.num_envs // num_devices
            raise ValueError(f"num_minibatches={self.num_minibatches} does not divide the environments per device "
                             f"({local_envs}): recurrent minibatches are whole sequences, so use a divisor of "
                             f"{local_envs}")
        horizon = self.reward_shaping_horizon
        if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 0:
            raise ValueError(f"reward_shaping_horizon={horizon!r}: must be a whole number of team steps >= 0 "
                             "(0: no shaping)")
        checks.positive_ints(self, "num_minibatches")
        return self

    def env_kwargs(self) -> dict:
        """What the env is made with for this config (``rlpar.run.runner``): the reward shaping's horizon in steps of
        each env (``reward_shaping_horizon / num_envs``, at least 1), where shaping is on."""
        if not isinstance(self.reward_shaping_horizon, int) or self.reward_shaping_horizon <= 0:
            return {}  # off, or refused by validate
        return {"reward_shaping_horizon": max(1, round(self.reward_shaping_horizon / self.num_envs))}
