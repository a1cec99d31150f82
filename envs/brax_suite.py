"""brax environments (``brax-ant``, ``brax-inverted_pendulum``, ...) on the engine's environment contract.

Imported by ``envs.suites`` only when such an env is built; it imports brax (the ``brax`` extra).

brax's API is state-in, state-out: ``env.reset(key) -> State``, ``env.step(state, action) -> State`` with
``State(pipeline_state, obs, reward, done, metrics, info)``. For training brax stacks ``EpisodeWrapper`` (counts
steps; at ``episode_length`` sets ``done`` and ``info["truncation"] = 1 - done_of_the_env``) under
``AutoResetWrapper`` (swaps a done env back to the first state it ever had). Here ``BraxEnv`` keeps brax's
``EpisodeWrapper``, so the time limit and its truncation flag are brax's own, and exposes the gymnax 0.0.x
five-value ``step_env``/``reset_env`` with ``info["truncation"]``; ``envs.adapters.FiveToSixStep`` then splits
``done`` into terminated vs truncated by that flag, puts the pre-reset observation in ``info["final_observation"]``
and auto-resets. Unlike ``AutoResetWrapper`` the reset is a fresh ``env.reset`` with its own key (a new random
initial state per episode, as gymnax does), made only for the environments that finished
(``envs.adapters.reset_where_done``).

Actions: brax envs take ``[-1, 1]^d`` and scale to their actuators themselves, so the action space is that box.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import warnings
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from envs.adapters import FiveToSixStep

PREFIX = "brax-"
BACKENDS = ("generalized", "positional", "spring", "mjx")
# The default physics backend: the fastest on CPU where measured (ant and inverted_pendulum, env-only steps per
# second; docs/environments.md, "Environment suites"); the other envs default to spring too, unmeasured, and to
# generalized where brax supports nothing else (swimmer).
DEFAULT_BACKEND = "spring"
ONLY_BACKEND = "generalized"  # what an env that refuses the default supports


@struct.dataclass
class BraxParams:
    """brax envs have no per-call params (their system is fixed at construction); gymnax's API wants an object."""


def default_mujoco_gl() -> None:
    """On a Linux machine without a display MuJoCo's renderer (GIFs) can only use EGL or OSMesa, and MuJoCo picks
    its OpenGL platform once, when first imported: unless ``MUJOCO_GL`` is set, set it to ``egl`` before that."""
    if sys.platform.startswith("linux") and "mujoco" not in sys.modules and not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")


def import_package():
    """Import brax (``ImportError`` without the extra); see ``import_brax``."""
    import_brax()


def import_brax():
    """``brax.envs``, imported without the lines mujoco prints when its optional warp backend is missing and
    without brax's notice that it is no longer maintained; ``default_mujoco_gl`` first."""
    default_mujoco_gl()
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not actively being maintained.*")
        from brax import envs as brax_envs
    return brax_envs


def split_id(env_id: str) -> tuple[str, str | None]:
    """``"brax-ant@spring"`` -> ``("ant", "spring")``; ``"brax-ant"`` -> ``("ant", None)``."""
    name, _, backend = env_id[len(PREFIX):].partition("@")
    return name, backend or None


class BraxEnv:
    """One brax env under brax's ``EpisodeWrapper``, with gymnax's interface and a five-value ``step_env``."""

    def __init__(self, name: str, backend: str | None = None, episode_length: int = 1000, action_repeat: int = 1,
                 **brax_kwargs):
        brax_envs = import_brax()
        from brax.envs.wrappers.training import EpisodeWrapper

        known = sorted(brax_envs._envs)
        if name not in known:
            import difflib

            close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(PREFIX + c for c in close)}?" if close else ""
            raise ValueError(f"unknown brax env {PREFIX + name!r}.{hint} brax's envs: "
                             f"{', '.join(PREFIX + k for k in known)}")
        if backend is not None and backend not in BACKENDS:
            raise ValueError(f"brax backend {backend!r}: must be one of {', '.join(BACKENDS)} "
                             f"(e.g. --env {PREFIX}{name}@{BACKENDS[0]})")
        for value, what in ((episode_length, "episode_length"), (action_repeat, "action_repeat")):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{what}={value!r}: must be a positive integer")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not actively being maintained.*")
            try:
                env = brax_envs.get_environment(name, backend=backend or DEFAULT_BACKEND, **brax_kwargs)
                backend = backend or DEFAULT_BACKEND
            except ValueError as err:  # brax: "Unsupported backend: spring."
                if backend is not None or "backend" not in str(err):
                    raise ValueError(f"{PREFIX}{name}@{backend or DEFAULT_BACKEND}: {err}") from None
                env, backend = brax_envs.get_environment(name, backend=ONLY_BACKEND, **brax_kwargs), ONLY_BACKEND
        self.brax_name, self.backend = name, backend
        self.episode_length, self.action_repeat = episode_length, action_repeat
        self._env = EpisodeWrapper(env, episode_length, action_repeat)
        # brax's observation_size runs a reset op by op (seconds); the traced shape costs nothing.
        obs = jax.eval_shape(self._env.reset, jax.ShapeDtypeStruct((2,), jnp.uint32)).obs
        if not isinstance(obs, jax.ShapeDtypeStruct) or len(obs.shape) != 1:
            raise ValueError(f"{self.name}: observations {obs} are not one vector; rlpar's brax adapter takes only "
                             "vector observations")
        self._obs_size = obs.shape[0]

    @property
    def max_steps_in_episode(self) -> int:
        """Steps of ours per episode at most (brax counts ``action_repeat`` physics steps per step)."""
        return -(-self.episode_length // self.action_repeat)

    # ---- the gymnax interface ----
    @property
    def name(self) -> str:
        return f"{PREFIX}{self.brax_name}@{self.backend}"

    @property
    def default_params(self) -> BraxParams:
        return BraxParams()

    def action_space(self, params=None):
        from gymnax.environments import spaces

        return spaces.Box(-1.0, 1.0, (self._env.action_size,), jnp.float32)

    def observation_space(self, params):
        from gymnax.environments import spaces

        return spaces.Box(-jnp.inf, jnp.inf, (self._obs_size,), jnp.float32)

    def reset_env(self, key, params):
        state = self._env.reset(key)
        return state.obs, state

    def step_env(self, key, state, action, params):
        state = self._env.step(state, action)
        done = state.done.astype(bool)
        info = {"truncation": state.info["truncation"].astype(bool)}
        return state.obs, state, state.reward.astype(jnp.float32), done, info

    def reset(self, key, params=None):
        return self.reset_env(key, params)

    def step(self, key, state, action, params=None):
        return self.step_env(key, state, action, params)

    # ---- GIFs (rlpar.evaluate --gif) ----
    _FRAME_SIZE = (240, 320)  # height, width

    def _renderer(self):
        import mujoco

        model = self._env.sys.mj_model
        return mujoco.Renderer(model, *self._FRAME_SIZE)

    def check_render(self) -> None:
        """Raise ``ValueError`` if MuJoCo's OpenGL renderer (brax draws through it) cannot start here."""
        try:
            self._renderer().close()
        except Exception as err:  # noqa: BLE001 (whatever stops it, the user gets one line)
            gl = os.environ.get("MUJOCO_GL", "unset")
            message = " ".join(str(err).split())
            raise ValueError(f"--gif: brax draws through MuJoCo's OpenGL renderer, which cannot start here "
                             f"(MUJOCO_GL={gl}: {type(err).__name__}: {message}); without a display it needs EGL "
                             "(MUJOCO_GL=egl) or OSMesa (MUJOCO_GL=osmesa) libraries") from None

    def render_frames(self, states: Any, on_frame=None):
        """``[T, H, W, 3]`` uint8 frames of brax states stacked ``[T, ...]`` (MuJoCo's renderer, through the env's
        tracking camera where it has one), ``on_frame(i, T)`` after each."""
        import mujoco
        import numpy as np

        model = self._env.sys.mj_model
        camera = "track" if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "track") >= 0 else -1
        q, qd = np.asarray(states.pipeline_state.q), np.asarray(states.pipeline_state.qd)
        data, frames = mujoco.MjData(model), []
        with self._renderer() as renderer:
            for i in range(len(q)):
                data.qpos, data.qvel = q[i], qd[i]
                mujoco.mj_forward(model, data)
                renderer.update_scene(data, camera=camera)
                frames.append(renderer.render())
                if on_frame is not None:
                    on_frame(i, len(q))
        return np.stack(frames)

    @property
    def brax_env(self) -> Any:
        """The brax env itself (under ``EpisodeWrapper``)."""
        return self._env


def make(env_id: str, **env_kwargs):
    """``(env, params)`` for ``brax-NAME`` or ``brax-NAME@BACKEND``: ``BraxEnv`` under ``FiveToSixStep`` (sparse
    reset). ``env_kwargs``: ``backend`` (instead of the ``@`` suffix), ``episode_length`` (default 1000, brax's),
    ``action_repeat`` (1), and any keyword of the brax env's constructor."""
    name, backend = split_id(env_id)
    if backend is not None and env_kwargs.get("backend", backend) != backend:
        raise ValueError(f"env {env_id!r}: backend given twice ({backend!r} in the id, {env_kwargs['backend']!r})")
    env_kwargs.setdefault("backend", backend)
    raw = BraxEnv(name, **env_kwargs)
    params = raw.default_params
    return FiveToSixStep(raw, params, sparse_reset=True), params
