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
    # Breakout with MINATAR stalls on a plateau, with gamma 0.99 or 0.999: gymnax-blines' Breakout settings instead
    # (its MLP of 2 x 256 on the flattened image, gamma 0.999, 8 minibatches, a constant learning rate), which also
    # train faster on a CPU than the convolution. Its greedy return against gymnax-blines': benchmarks/README.md
    # (row "learning-breakout").
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
# fewer steps each, a larger learning rate and entropy bonus, and one collector step per loop iteration (it compiles
# faster there), chosen by a search for the greedy return at 1e7 steps of the program the command line compiles
# (benchmarks/preset_search.py). The search, the shapes it rejected and what the shape costs in speed:
# benchmarks/README.md (row "tpu-breakout-preset") and docs/accelerators.md.
ACCELERATOR: dict[str, dict] = {
    "Breakout-MinAtar": dict(PRESETS["Breakout-MinAtar"], num_envs=512, num_steps=32, lr=1e-3, ent_coef=0.03,
                             collector_unroll=1),
}
