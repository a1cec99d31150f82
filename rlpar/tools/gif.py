"""An episode of a run's greedy policy drawn as a GIF: with gymnax's visualizer, or a suite's own renderer.

The suites (Craftax, brax, JaxMARL) provide theirs through the env adapter as ``render_frames`` (at most
``SUITE_GIF_FRAMES`` steps; an adapter whose ``renders_from_actions`` is true, JaxMARL's SMAX, also gets each step's
actions and keys). ``check_gif`` refuses, before anything runs, a GIF that cannot be made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from rlpar.run import rundir
from rlpar.tools.policy import episode_limit, load_policy, make_env, make_episodes, quiet

# Environment names gymnax 1.0's Visualizer can draw (gymnax/visualize/visualizer.py); others give a blank figure.
GIF_ENVS = (
    "Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Catch-bsuite",
    "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar",
    "Pong-misc", "PointRobot-misc", "MetaMaze-misc", "FourRooms-misc",
)


# A GIF drawn by a suite's renderer shows at most this many steps (a Craftax episode may last 10,000).
SUITE_GIF_FRAMES = 1000

# gymnax draws these through gymnasium, which needs pygame.
_CLASSIC_CONTROL = ("Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0")


def check_gif(run_dir: str | Path, path: str | Path) -> None:
    """Refuse a GIF that cannot be made, before anything runs: an env gymnax cannot draw, a suite env whose
    renderer does not work here, a missing package, a directory that does not exist."""
    import importlib.util

    from envs.suites import suite_of

    env_id = rundir.read_meta(run_dir)["run"]["env"]
    if suite_of(env_id) is not None:
        renderer = make_env(rundir.read_meta(run_dir))[0].unwrapped
        if not hasattr(renderer, "render_frames"):
            raise ValueError(f"--gif: {env_id!r} has no renderer in rlpar")
        renderer.check_render()  # ValueError saying why it cannot draw here
        needs = ("PIL",)
    elif env_id not in GIF_ENVS:
        raise ValueError(f"--gif: gymnax's visualizer cannot draw {env_id!r}; it draws {', '.join(GIF_ENVS)}")
    else:
        needs = ("matplotlib", "pygame") if env_id in _CLASSIC_CONTROL else ("matplotlib",)
    missing = [name for name in needs if importlib.util.find_spec(name) is None]
    if missing:
        raise ValueError(f"--gif needs {' and '.join(missing)}: pip install -e \".[extras]\" "
                         f"(or pip install {' '.join(missing)})")
    folder = Path(path).parent
    if not folder.is_dir():
        raise ValueError(f"--gif {str(path)!r}: the directory {str(folder)!r} does not exist; create it or give "
                         "another path")


def write_gif(run_dir: str | Path, path: str | Path, seed: int = 0, max_frames: int | None = None,
              slot: int | str | None = None, on_frame: Callable[[int, int], None] | None = None,
              say: Callable[[str], None] = quiet) -> int:
    """Render the greedy policy's first episode (its first ``max_frames`` steps, if given) to ``path`` with gymnax's
    visualizer or the suite's renderer; returns the frame count. ``on_frame(i, n)`` is called as frame ``i`` of
    ``n`` is drawn; ``say`` is told of each long step (and, without ``on_frame``, of every 50th frame)."""
    import time

    import jax

    check_gif(run_dir, path)
    if on_frame is None and say is not quiet:
        on_frame = _frame_progress(say)
    policy = load_policy(run_dir, 1, slot, say)
    env, env_params = make_env(rundir.read_meta(run_dir))
    drawer = env.unwrapped
    max_steps = episode_limit(env, env_params)
    if hasattr(drawer, "render_frames"):
        max_steps = min(max_steps, max_frames or SUITE_GIF_FRAMES)
    run = make_episodes(policy, env, env_params, 1, max_steps)
    say(f"compiling and running the episode to draw (at most {max_steps} steps) ...")
    start = time.perf_counter()
    _, lengths, _, steps = jax.device_get(run(jax.random.PRNGKey(seed)))
    frames = min(int(lengths[0]), max_steps) if max_frames is None else min(int(lengths[0]), max_frames)
    say(f"ran it in {time.perf_counter() - start:.1f}s; drawing {frames} frames into {path} ...")
    if hasattr(drawer, "render_frames"):
        episode = jax.tree.map(lambda x: x[:frames, 0], steps)
        states = _unwrap_state(episode.state)
        if getattr(drawer, "renders_from_actions", False):  # replays the steps (JaxMARL's SMAX)
            drawn = drawer.render_frames(states, on_frame, actions=episode.action, keys=episode.key)
        else:
            drawn = drawer.render_frames(states, on_frame)
        _write_frames(drawn, path)
        return len(drawn)
    gymnax_states = [_unwrap_state(jax.tree.map(lambda x: x[t, 0], steps.state)) for t in range(frames)]
    _animate(drawer, env_params, gymnax_states, np.cumsum(steps.reward[:frames, 0]), path, on_frame)  # single-agent
    return frames


def _write_frames(frames: np.ndarray, path, fps: int = 20) -> None:
    """``frames [T, H, W, 3]`` uint8 as an animated GIF (Pillow)."""
    from PIL import Image

    images = [Image.fromarray(np.asarray(frame)) for frame in frames]
    images[0].save(str(path), save_all=True, append_images=images[1:], duration=1000 // fps, loop=0)


def _unwrap_state(state: Any) -> Any:
    """The gymnax environment's own state inside the project's wrapper states."""
    while hasattr(state, "env_state"):
        state = state.env_state
    return state


def _animate(env, env_params, states: list, cumulative_rewards, path, on_frame) -> None:
    import os

    import matplotlib

    matplotlib.use("Agg")
    # gymnasium draws classic-control frames with pygame: no window, no sound card, no banner.
    for name in ("SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):
        os.environ.setdefault(name, "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    import matplotlib.pyplot as plt
    from gymnax.visualize import Visualizer
    from matplotlib import animation

    vis = Visualizer(env, env_params, states, cumulative_rewards)
    try:  # gymnax's own animate() without its save, so that the frames can report progress
        movie = animation.FuncAnimation(vis.fig, vis.update, frames=len(states), init_func=vis.init, blit=False,
                                        interval=vis.interval)
        movie.save(str(path), writer=animation.PillowWriter(fps=1000 // vis.interval), progress_callback=on_frame)
    finally:
        plt.close(vis.fig)


def _frame_progress(say: Callable[[str], None]) -> Callable[[int, int], None]:
    """``on_frame`` for ``write_gif``: tells ``say`` of every 50th frame drawn, and of the last."""
    def on_frame(i: int, n: int) -> None:
        if (i + 1) % 50 == 0 or i + 1 == n:
            say(f"  drew {i + 1}/{n} frames")

    return on_frame
