"""``python -m rlpar.evaluate RUN_DIR --episodes N [--seed S] [--gif FILE]``: score a run's final policy.

Loads the newest complete checkpoint of ``RUN_DIR``, runs ``N`` episodes of the greedy policy (one environment
each, in parallel on one device, until every episode has ended) and prints the mean and standard deviation of
their undiscounted returns. ``--gif FILE`` also renders the first episode with gymnax's visualizer.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from rlpar import rundir

# Environment names gymnax 1.0's Visualizer can draw (gymnax/visualize/visualizer.py); others give a blank figure.
GIF_ENVS = (
    "Acrobot-v1", "CartPole-v1", "Pendulum-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Catch-bsuite",
    "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar",
    "Pong-misc", "PointRobot-misc", "MetaMaze-misc", "FourRooms-misc",
)


class Evaluation(NamedTuple):
    returns: np.ndarray  # [N] undiscounted return of each episode
    lengths: np.ndarray  # [N] steps of each episode

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))


class Policy(NamedTuple):
    """A trained policy as read back from a run dir."""

    act: Any  # (params, obs [N, ...], key or None) -> action [N, ...]; None = greedy
    params: Any
    env_id: str
    update: int  # the checkpoint's update number


def load_policy(run_dir: str | Path, num_envs: int = 1) -> Policy:
    """The parameters of ``run_dir``'s newest complete checkpoint and its agent's ``act`` for ``num_envs`` envs."""
    import agents
    import envs
    from rlpar.checkpoint import CheckpointError, Checkpoints

    meta = rundir.read_meta(run_dir)
    if meta["run"].get("num_seeds", 1) != 1 or meta["run"].get("sweep"):
        raise ValueError(f"{run_dir} trained several seeds or a sweep in one run (num_seeds="
                         f"{meta['run'].get('num_seeds')}, sweep={meta['run'].get('sweep')!r}): evaluate supports "
                         "runs of one seed only")
    spec = agents.get(meta["agent"])
    config = rundir.build_config(spec.config_cls, meta["config"])
    checkpoints = Checkpoints(Path(run_dir) / rundir.CHECKPOINTS)
    step = checkpoints.latest()
    if step is None:
        raise CheckpointError(f"no complete checkpoint in {checkpoints.directory}: nothing to evaluate")
    state = checkpoints.restore(step).state
    params = _first_row(state["params"])  # parameters are identical on every device; take device 0's copy
    env, env_params = envs.make(meta["run"]["env"])
    agent = spec.make(config, env, env_params, num_envs, None)
    if not hasattr(agent, "act"):
        raise ValueError(f"{run_dir} was trained with {meta['agent']!r}, which has no stateless act(): evaluate "
                         "supports feed-forward agents (ppo) only")
    act = agent.act
    if getattr(config, "normalize_obs", False):  # the policy reads observations through the run's statistics
        from agents.normalization import RunningStats

        raw = _first_row(state["obs_stats"])
        obs_stats = RunningStats(**raw) if isinstance(raw, dict) else raw
        act = lambda params, obs, key=None: agent.act(params, obs, key, obs_stats=obs_stats)  # noqa: E731
    return Policy(act, params, meta["run"]["env"], step)


def _first_row(tree: Any) -> Any:
    import jax

    return jax.tree.map(lambda x: np.asarray(x)[0], tree)


def make_episodes(act, env, env_params, num_episodes: int, max_steps: int):
    """``episodes(params, key) -> (returns [N], lengths [N], done [N], (states, rewards) [T, N, ...])``: ``N``
    greedy episodes stepped ``T = max_steps`` times in one ``lax.scan``; each env's first episode counts (later ones,
    after the auto-reset, are ignored). ``states[t]`` is the state the action of step ``t`` was taken in."""
    import jax
    import jax.numpy as jnp

    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def episodes(params, key):
        key, key_reset = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key_reset, num_episodes), env_params)

        def step(carry, _):
            obs, state, key, done, ret, length = carry
            key, key_step = jax.random.split(key)
            action = act(params, obs, None)
            next_obs, next_state, reward, terminated, truncated, _ = step_envs(
                jax.random.split(key_step, num_episodes), state, action, env_params
            )
            running = jnp.logical_not(done)
            ret = ret + jnp.where(running, reward, 0.0)
            length = length + running.astype(jnp.int32)
            done = done | terminated | truncated
            return (next_obs, next_state, key, done, ret, length), (state, reward)

        zeros = jnp.zeros(num_episodes)
        init = (obs, state, key, zeros.astype(bool), zeros, zeros.astype(jnp.int32))
        (_, _, _, done, ret, length), trajectory = jax.lax.scan(step, init, None, length=max_steps)
        return ret, length, done, trajectory

    return jax.jit(episodes)


def _max_steps(env_params, default: int = 10_000) -> int:
    return int(getattr(env_params, "max_steps_in_episode", default))


def evaluate(run_dir: str | Path, episodes: int = 10, seed: int = 0) -> Evaluation:
    """Mean and spread of the greedy policy's return over ``episodes`` episodes (``ValueError`` for a bad run dir)."""
    import jax

    import envs

    if not isinstance(episodes, int) or episodes <= 0:
        raise ValueError(f"episodes={episodes!r}: must be a positive integer")
    policy = load_policy(run_dir, episodes)
    env, env_params = envs.make(policy.env_id)
    run = make_episodes(policy.act, env, env_params, episodes, _max_steps(env_params))
    returns, lengths, done, _ = jax.device_get(run(policy.params, jax.random.PRNGKey(seed)))
    if not np.all(done):
        raise RuntimeError(f"{int(np.sum(~done))} of {episodes} episodes did not end within "
                           f"{_max_steps(env_params)} steps")
    return Evaluation(np.asarray(returns), np.asarray(lengths))


def _unwrap_state(state: Any) -> Any:
    """The gymnax environment's own state inside the project's wrapper states."""
    while hasattr(state, "env_state"):
        state = state.env_state
    return state


def write_gif(run_dir: str | Path, path: str | Path, seed: int = 0, max_frames: int | None = None) -> int:
    """Render the greedy policy's first episode (its first ``max_frames`` steps, if given) to ``path`` with gymnax's
    visualizer; returns the frame count."""
    import jax

    import envs

    meta = rundir.read_meta(run_dir)
    env_id = meta["run"]["env"]
    if env_id not in GIF_ENVS:
        raise ValueError(f"--gif: gymnax's visualizer cannot draw {env_id!r}; it draws {', '.join(GIF_ENVS)}")
    policy = load_policy(run_dir, 1)
    env, env_params = envs.make(env_id)
    run = make_episodes(policy.act, env, env_params, 1, _max_steps(env_params))
    _, lengths, _, (states, rewards) = jax.device_get(run(policy.params, jax.random.PRNGKey(seed)))
    frames = int(lengths[0]) if max_frames is None else min(int(lengths[0]), max_frames)
    gymnax_states = [_unwrap_state(jax.tree.map(lambda x: x[t, 0], states)) for t in range(frames)]
    _animate(env.unwrapped, env_params, gymnax_states, np.cumsum(rewards[:frames, 0]), path)
    return frames


def _animate(env, env_params, states: list, cumulative_rewards, path) -> None:
    import os

    import matplotlib

    matplotlib.use("Agg")
    # gymnasium draws classic-control frames with pygame: no window, no sound card, no banner.
    for name in ("SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):
        os.environ.setdefault(name, "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    from gymnax.visualize import Visualizer

    try:
        Visualizer(env, env_params, states, cumulative_rewards).animate(str(path))
    except ModuleNotFoundError as err:  # classic-control frames are drawn by gymnasium, which needs pygame
        raise RuntimeError(f"--gif for {env.name} needs {err.name}: pip install {err.name}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlpar.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", metavar="RUN_DIR",
                        help="a run dir with a checkpoint (python -m rlpar.train ... --run-dir)")
    parser.add_argument("--episodes", type=int, default=10, metavar="N", help="episodes to run (default: 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the environments' resets (default: 0)")
    parser.add_argument("--gif", metavar="FILE", help="also render the first episode to this GIF")
    args = parser.parse_args(argv)
    try:
        result = evaluate(args.run_dir, args.episodes, args.seed)
        print(f"{args.run_dir}: greedy policy, {args.episodes} episodes: return {result.mean:.2f} +- {result.std:.2f} "
              f"(min {result.returns.min():.2f}, max {result.returns.max():.2f}), "
              f"mean length {result.lengths.mean():.1f}")
        if args.gif:
            frames = write_gif(args.run_dir, args.gif, args.seed)
            print(f"wrote {args.gif} ({frames} frames)")
    except (ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
