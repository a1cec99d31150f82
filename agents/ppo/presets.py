"""Per-environment PPO presets: changes from the ``PPOConfig`` defaults that make each env learn on a 2-core CPU.

The CLI starts from the preset of ``--env`` and applies the flags given on top; from Python use
``PPOConfig.for_env(env_id)``. ``ACCELERATOR`` holds an env's preset for a TPU or GPU, where far more envs per
update cost little time: ``for_env`` takes it when JAX's default backend is not the CPU (or ``platform=`` says so).
The returns each preset reaches are measured in README.md ("Presets").
Environments without an entry use the plain defaults (tuned for CartPole-v1), except brax envs (``BRAX``).
"""

from __future__ import annotations

# brax continuous control (envs.brax_suite): every brax-NAME without an entry of its own starts from this.
BRAX = dict(
    num_envs=32, num_steps=64, total_timesteps=5_000_000, update_epochs=4, num_minibatches=16, gamma=0.97, lr=3e-4,
    ent_coef=0.0, normalize_obs=True, hidden_sizes=(128, 128),
)


# MinAtar games (10x10 images through the CNN torso); budget 2M for a CPU, the published ones are 1e7.
MINATAR = dict(
    num_envs=64, num_steps=128, total_timesteps=2_000_000, lr=5e-4, hidden_sizes=(128,), activation="relu",
)


class _Presets(dict):
    """``{env id: preset}``; ``get`` also serves ids of a family: ``brax-NAME@BACKEND`` finds the entry of
    ``brax-NAME``, and a brax env without one gets ``BRAX``."""

    def get(self, env_id, default=None):
        base = env_id.partition("@")[0] if isinstance(env_id, str) else env_id
        if env_id in self or base in self:
            return self[env_id if env_id in self else base]
        if isinstance(base, str) and base.startswith("brax-"):
            return BRAX
        return default


PRESETS: dict[str, dict] = _Presets({
    # 3 seeds at 500k steps (benchmarks/learning.py --peer rejax): constant lr greedy 500.0 +- 0.0, annealed 436.5 +-
    # 85.8 (the defaults reach 500 only at 1M); half the steps of the defaults, so the quick start trains in half the time.
    "CartPole-v1": dict(total_timesteps=500_000, anneal_lr=False),
    "Acrobot-v1": dict(total_timesteps=500_000),
    # Tried at the published budgets (3 seeds, benchmarks/learning.py, README "Learning quality"): MountainCar with
    # lr 1e-2 at 250k reached -165.9 +- 37.1 (one seed of three at -118) and Pendulum with gamma 0.95 at 400k
    # -271.6 +- 103.2, both less reliable than these (MountainCar 2M: -112.4; Pendulum 400k: -209.5 +- 3.2).
    "MountainCar-v0": dict(
        num_envs=16, num_steps=64, total_timesteps=2_000_000, normalize_obs=True, gae_lambda=0.98, ent_coef=0.0,
    ),
    "Pendulum-v1": dict(
        num_envs=16, num_steps=128, total_timesteps=400_000, update_epochs=10, num_minibatches=32, gamma=0.9,
        lr=1e-3, ent_coef=0.0,
    ),
    "MountainCarContinuous-v0": dict(
        num_envs=16, num_steps=64, total_timesteps=1_000_000, normalize_obs=True, gamma=0.999, ent_coef=0.001,
    ),
    # One preset for every MinAtar game (as gymnax-blines and PureJaxRL use one config for all of them).
    **{f"{game}-MinAtar": MINATAR for game in ("Asterix", "Freeway", "Seaquest", "SpaceInvaders")},
    # Breakout with MINATAR stalls at a return of 5.5 from 0.5M to 3M steps, with gamma 0.99 or 0.999: gymnax-blines'
    # Breakout settings instead (its MLP of 2 x 256 on the flattened image, gamma 0.999, 8 minibatches, a constant
    # learning rate), which also train about 3x faster here than the convolution.
    # Measured: greedy 24.4 at 1e7 steps (gymnax-blines 22.9), out of the plateau after 1.6M (README, "Presets").
    "Breakout-MinAtar": dict(MINATAR, gamma=0.999, num_minibatches=8, anneal_lr=False, torso="mlp",
                             hidden_sizes=(256, 256), total_timesteps=10_000_000),
    # Craftax (envs.craftax_suite): symbolic observations of 1345 (Classic) / 8268 values in [0, 1]; a CPU budget.
    "Craftax-Classic-Symbolic-v1": dict(
        num_envs=64, num_steps=64, total_timesteps=1_000_000, update_epochs=2, num_minibatches=4, lr=3e-4,
        gae_lambda=0.8,
    ),
    "Craftax-Symbolic-v1": dict(  # Classic's, not measured for learning
        num_envs=64, num_steps=64, total_timesteps=1_000_000, update_epochs=2, num_minibatches=4, lr=3e-4,
        gae_lambda=0.8,
    ),
    # Returns reach 1000 (every step balanced) only with a long horizon; the critic's targets (up to 1 / (1 - gamma)
    # = 200) move too far per update for value clipping at 0.2.
    "brax-inverted_pendulum": dict(
        num_envs=16, num_steps=64, total_timesteps=500_000, update_epochs=10, num_minibatches=8, gamma=0.995,
        ent_coef=0.0, normalize_obs=True, clip_value=False,
    ),
})


# On an accelerator (JAX's default backend not the CPU): the CPU preset's learning settings with many more envs and
# fewer steps each, chosen by measurement on one TPU v5e on the program the command line compiles, one seed's
# (benchmarks/preset_search.py --num-seeds 1 --seed S, 1e7 steps, greedy return of 64 episodes, one collector step;
# benchmarks/results/2026-12-06/breakout_single_shapes_tpu_v5e.jsonl). 512 envs x 32 steps, 8 minibatches, lr 1e-3,
# ent_coef 0.03, seeds 0-5: 77.3, 56.6, 47.2, 62.9, 69.7, 94.6 (mean 68.1). The same batch as 1024 x 16, twice the
# steps per env: 1024 x 16 ended at 16.4-18.0 (seeds 0-2, two collector steps; 16.4-28.4 over nine one-slot runs,
# results/2026-12-06/breakout_single_vs_slots_tpu_v5e.jsonl), at means of 12-21 with lr 5e-4, ent_coef 0.01, gamma
# 0.99, annealing or 4 minibatches; 1024 x 32 at 18-26 (16 minibatches) and 3.5-24 (8); 2048 x 8 at 12-19. Slots of
# one search program reached more at 1024 x 16 (53-87 with two collector steps,
# results/2026-12-05/preset_search_breakout_tpu_v5e.jsonl), which is why an earlier preset took that shape;
# docs/accelerators.md compares the two. The cost: 32 sequential env steps per update at 512 envs, so 1e7 steps train
# in 9.9 s (1.01M SPS) from the command line, against 5.3 s (1.87M) at 1024 x 16.
# One collector step per loop iteration (collector_unroll=1, not the accelerator's 2): at 1024 x 16 the program
# compiled in 14.1 s against 17.7 s and trained at 1.82M SPS against 2.02M (benchmarks/train_sps.py --force
# collector_unroll=1; results/2026-12-06/breakout_single_vs_slots_tpu_v5e.jsonl); two at 512 x 32 are not measured.
ACCELERATOR: dict[str, dict] = {
    "Breakout-MinAtar": dict(PRESETS["Breakout-MinAtar"], num_envs=512, num_steps=32, lr=1e-3, ent_coef=0.03,
                             collector_unroll=1),
}
