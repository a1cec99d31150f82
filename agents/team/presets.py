"""Per-environment presets of the team agents (the CLI starts from ``--env``'s; flags override).

``JAXMARL_IPPO_MPE`` is JaxMARL's own ``ippo_ff_mpe`` configuration (16 envs x 128 steps, lr 2.5e-4 annealed, 4
epochs of 4 minibatches, gamma 0.99, GAE lambda 0.95, clip 0.2, entropy 0.01, value 0.5, grad norm 0.5, tanh 64x64
actor and critic, 1e7 team steps). Its value loss is clipped like rlpar's PPO (``clip_value``); JaxMARL normalises
advantages per minibatch as well.
"""

from __future__ import annotations

import dataclasses

JAXMARL_IPPO_MPE = dict(
    num_envs=16, num_steps=128, total_timesteps=10_000_000, lr=2.5e-4, anneal_lr=True, update_epochs=4,
    num_minibatches=4, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
    hidden_sizes=(64, 64), activation="tanh",
)

# SMAX with MAPPO at a budget a 2-core CPU finishes within the hour (JaxMARL's mappo_smax runs 1e7 steps on GPU).
SMAX = dict(
    num_envs=64, num_steps=128, total_timesteps=2_000_000, lr=4e-4, update_epochs=4, num_minibatches=4,
    gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
    hidden_sizes=(128, 128), activation="relu", agent_id=True,
)

# Overcooked (cramped_room, the env's default layout) with IPPO: JaxMARL's ippo_ff_overcooked.yaml (16 envs x 128
# steps, lr 2.5e-4 annealed, 4 epochs x 4 minibatches, 5e6 steps, tanh 64x64) and its reward shaping, annealed
# from 1 to 0 over the first 2.5e6 team steps (REW_SHAPING_HORIZON). That file names the coord_ring layout; its
# script's earlier versions and the results JaxMARL reports train cramped_room.
OVERCOOKED = dict(
    num_envs=16, num_steps=128, total_timesteps=5_000_000, lr=2.5e-4, anneal_lr=True, update_epochs=4,
    num_minibatches=4, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
    hidden_sizes=(64, 64), activation="tanh", reward_shaping_horizon=2_500_000,
)

PRESETS = {
    "marl-MPE_simple_spread_v3": JAXMARL_IPPO_MPE,
    "marl-MPE_simple_reference_v3": JAXMARL_IPPO_MPE,
    "marl-overcooked": OVERCOOKED,
}


def preset(config_cls, env_id: str) -> dict:
    """The preset of ``env_id`` (SMAX ids of any map share one), keeping only fields ``config_cls`` has."""
    base = env_id.partition("@")[0] if isinstance(env_id, str) else ""
    values = PRESETS.get(env_id) or PRESETS.get(base) or (SMAX if "SMAX" in base else {})
    fields = {f.name for f in dataclasses.fields(config_cls)}
    return {k: v for k, v in values.items() if k in fields}
