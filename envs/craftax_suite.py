"""Craftax (``Craftax-Classic-Symbolic-v1``, ``Craftax-Symbolic-v1``) on the engine's environment contract.

Imported by ``envs.suites`` only when such an env is built; it imports craftax (the ``craftax`` extra).

Craftax envs are gymnax 0.0.x-style: ``step_env(key, state, action, params) -> (obs, state, reward, done, info)``
without auto-reset, and ``done`` mixes three endings: death (health 0), lava (Classic) or the final boss (full
Craftax), and the time limit ``state.timestep >= params.max_timesteps``. ``CraftaxEnv`` gives them gymnax spaces
and per-episode metrics; ``envs.adapters.FiveToSixStep`` then splits ``done`` by Craftax's clock (a ``done`` at the
time limit is a truncation unless ``is_terminal``, asked with the limit lifted, says the player died on that step),
adds ``info["final_observation"]`` and auto-resets. Building a Craftax world costs about 40 single-env steps on a
CPU, so the reset is sparse (``envs.adapters.reset_where_done``: only the environments that finished).

Episode metrics (``info["episode_metrics"]``, averaged by the engine over the episodes that end, logged as
``episode/achievements/NAME``): for each achievement, 1.0 if the episode unlocked it (its mean is the success rate
Craftax reports, as a fraction rather than a percentage), and ``achievements/count``, how many it unlocked.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from envs.adapters import FiveToSixStep

CLASSIC_ID = "Craftax-Classic-Symbolic-v1"
FULL_ID = "Craftax-Symbolic-v1"
IDS = (CLASSIC_ID, FULL_ID)

# Pixels per map block in GIF frames (Craftax's own "image" size).
_GIF_BLOCK_PIXELS = 16


def import_package():
    """Import craftax (``ImportError`` without the extra)."""
    import craftax  # noqa: F401


class CraftaxEnv:
    """A Craftax symbolic env (no auto-reset) with gymnax spaces, achievement metrics and a frame renderer.

    Keeps the five-value ``step_env``/``reset_env`` for ``FiveToSixStep``; ``step``/``reset`` are the same without
    auto-reset (wrap it with ``make`` for the engine's contract).
    """

    def __init__(self, env_id: str):
        from craftax.craftax_env import make_craftax_env_from_name

        if env_id not in IDS:
            raise ValueError(f"unknown Craftax env {env_id!r}: rlpar supports {', '.join(IDS)}")
        self._id = env_id
        self._env = make_craftax_env_from_name(env_id, auto_reset=False)
        if env_id == CLASSIC_ID:
            from craftax.craftax_classic.constants import Achievement
        else:
            from craftax.craftax.constants import Achievement
        self.achievements = tuple(a.name.lower() for a in sorted(Achievement, key=lambda a: a.value))

    # ---- the gymnax interface ----
    @property
    def name(self) -> str:
        return self._id

    @property
    def default_params(self):
        return self._env.default_params

    @property
    def num_actions(self) -> int:
        return self._env.num_actions

    def action_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Discrete(self._env.num_actions)

    def observation_space(self, params):
        from gymnax.environments import spaces

        box = self._env.observation_space(params)
        return spaces.Box(box.low, box.high, tuple(box.shape), box.dtype)

    def reset_env(self, key, params):
        return self._env.reset_env(key, params)

    def step_env(self, key, state, action, params):
        obs, state, reward, done, _ = self._env.step_env(key, state, action, params)
        return obs, state, jnp.asarray(reward, jnp.float32), done, {"episode_metrics": self.episode_metrics(state)}

    def reset(self, key, params=None):
        return self.reset_env(key, self.default_params if params is None else params)

    def step(self, key, state, action, params=None):
        return self.step_env(key, state, action, self.default_params if params is None else params)

    def is_terminal(self, state, params) -> jax.Array:
        return self._env.is_terminal(state, params)

    # ---- what the engine reads besides ----
    def episode_metrics(self, state: Any) -> dict[str, jax.Array]:
        """``{"achievements/NAME": 1.0 if unlocked in this episode, "achievements/count": how many}``."""
        unlocked = jnp.asarray(state.achievements).astype(jnp.float32)
        metrics = {f"achievements/{name}": unlocked[i] for i, name in enumerate(self.achievements)}
        metrics["achievements/count"] = jnp.sum(unlocked)
        return metrics

    def check_render(self) -> None:
        """Raise ``ValueError`` if Craftax's pixel renderer cannot start here. It is JAX code over textures that
        ship with craftax, so it needs no display; the first use builds Craftax's texture cache in its package."""
        try:
            _renderer(self._id)
        except Exception as err:  # noqa: BLE001 (whatever stops it, the user gets one line)
            raise ValueError(f"--gif: Craftax's renderer cannot start here: {type(err).__name__}: {err}") from None

    def render_frames(self, states: Any, on_frame=None):
        """``[T, H, W, 3]`` uint8 frames of Craftax states stacked ``[T, ...]``: Craftax's own pixel renderer (the
        player's view and inventory), ``on_frame(i, T)`` after each."""
        import numpy as np

        render = _renderer(self._id)
        count = len(jax.tree.leaves(states)[0])
        frames = []
        for i in range(count):
            frames.append(np.asarray(render(jax.tree.map(lambda x: x[i], states))))
            if on_frame is not None:
                on_frame(i, count)
        return np.stack(frames)


_RENDERERS: dict[str, Any] = {}


def _renderer(env_id: str):
    """Craftax's pixel renderer for ``env_id``, jitted, returning uint8 frames."""
    if env_id not in _RENDERERS:
        import contextlib
        import io

        if env_id == CLASSIC_ID:
            from craftax.craftax_classic.renderer import make_craftax_pixel_renderer
        else:
            from craftax.craftax.renderer import make_craftax_pixel_renderer
        with contextlib.redirect_stdout(io.StringIO()):  # Craftax prints while it loads its textures
            render = make_craftax_pixel_renderer(_GIF_BLOCK_PIXELS)
        _RENDERERS[env_id] = jax.jit(lambda state: jnp.clip(render(state), 0, 255).astype(jnp.uint8))
    return _RENDERERS[env_id]


def make(env_id: str, **env_kwargs):
    """``(env, params)`` for a Craftax id: ``CraftaxEnv`` under ``FiveToSixStep`` (sparse reset).

    ``env_kwargs`` replace fields of Craftax's ``EnvParams`` (e.g. ``max_timesteps=100``, the time limit).
    """
    raw = CraftaxEnv(env_id)
    params = raw.default_params
    unknown = sorted(set(env_kwargs) - set(params.__dataclass_fields__))
    if unknown:
        raise ValueError(f"env {env_id!r}: unknown option(s) {', '.join(unknown)}; Craftax's EnvParams has "
                         f"{', '.join(params.__dataclass_fields__)}")
    params = params.replace(**env_kwargs)
    return FiveToSixStep(raw, params, sparse_reset=True), params
