"""``python -m rlpar.evaluate RUN_DIR --episodes N [--seed S] [--slot I] [--gif FILE]``: score a run's policy.

Loads the newest complete checkpoint of ``RUN_DIR``, runs ``N`` episodes of the agent's greedy policy (its policy
export, ``Agent.policy(state, deterministic=True)``: any agent, recurrent ones included; one environment each, in
parallel on one device, until every episode has ended) and prints the mean and standard deviation of their
undiscounted returns. A multi-seed or sweep run is evaluated slot by slot (``--slot I``: one of them).
``--gif FILE`` also renders the first episode: with gymnax's visualizer, or for the suites (Craftax, brax) with
the suite's own renderer, which the env adapter provides as ``render_frames`` (at most ``SUITE_GIF_FRAMES``
steps; an adapter whose ``renders_from_actions`` is true, JaxMARL's SMAX, also gets each step's actions and keys).
Each step that can take a while (restoring the checkpoint, compiling and running the episodes, drawing the GIF's
frames) says what it is doing on stdout, as ``python -m rlpar.train`` does, and, where the amount is known, how far it
has got; stderr carries only a one-line error. From Python, pass ``say=print`` (or any ``str -> None``) to
``evaluate`` and ``write_gif`` for the same messages.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np

from rlpar import cli, errors, rundir

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

    fn: Callable  # (carry, obs [N, ...], key) -> (action [N, ...], carry): the agent's greedy policy export
    initial_carry: Callable[[int], Any]  # num_envs -> carry [N, ...]
    env_id: str
    update: int  # the checkpoint's update number
    slot: int  # which slot of a multi-seed / sweep run


def num_slots(meta: dict) -> int:
    return len(meta.get("slots", [])) or 1


def _quiet(message: str) -> None:
    pass


def say_on_stdout(message: str) -> None:
    """The command line's progress messages: one line each on stdout (stderr is for the one-line error)."""
    print(message, flush=True)


def is_population(meta: dict) -> bool:
    """A run of members searched or trained with PBT (``--search``): its members are compared, not pooled."""
    return bool(meta["run"].get("search"))


def resolve_slot(run_dir: str | Path, meta: dict, slot: int | str | None) -> int:
    """``slot`` as an index: ``"best"`` is the fittest member at the end (``rlpar.population.best_member``: the best
    ranked at the last PBT round, else by the last evaluation or training return); ``None`` is ``"best"`` for a
    population run and 0 otherwise. ``ValueError`` naming a slot the run does not have."""
    from rlpar import population

    if slot is None:
        slot = "best" if is_population(meta) else 0
    if slot == "best":
        path = Path(run_dir) / rundir.METRICS
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
        best = population.best_member(records)
        if best is None:
            raise ValueError(f"slot='best': the run in {run_dir} logged no members to rank (a run of one slot, or "
                             "no chunk logged yet): give --slot I")
        return best
    if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < num_slots(meta):
        raise ValueError(f"slot={slot!r}: the run in {run_dir} has {num_slots(meta)} slot(s): "
                         f"use 0..{num_slots(meta) - 1}, or best")
    return slot


def load_policy(run_dir: str | Path, num_envs: int = 1, slot: int | str | None = None,
                say: Callable[[str], None] = _quiet) -> Policy:
    """The greedy policy of ``run_dir``'s newest complete checkpoint: slot ``slot`` of a multi-seed, sweep or
    population run (``"best"``: its fittest member; default: ``"best"`` for a population run, else slot 0), with the
    hyperparameters that member had in the checkpoint; ``say`` is told when the checkpoint is read."""
    import jax

    from rlpar import checkpoint, parallel, registry, runner, seeds

    meta = rundir.read_meta(run_dir)
    slot = resolve_slot(run_dir, meta, slot)
    spec = registry.from_meta(meta)
    config = rundir.build_config(spec.config_cls, meta["config"])
    env, env_params = _make_env(meta)
    run = meta["run"]
    slots = seeds.make_slots(run.get("num_seeds", 1), run.get("sweep", ""), spec.config_cls,
                             search=run.get("search", ""), population=run.get("population", 0), seed=config.seed)
    groups = run.get("population_devices", 1)  # checkpoints hold [devices / groups, slots, ...] whatever the groups
    make = runner.make_program_factory(spec, config, slots, env, env_params,
                                       config.num_envs * groups // meta["num_devices"],
                                       members=parallel.MemberGroups(groups))
    devices = range(meta["num_devices"])  # only the count matters for the shapes
    abstract = parallel.state_shapes(lambda ax: make(ax).init, devices, *jax.random.split(jax.random.PRNGKey(0)),
                                     groups=groups)
    checkpoints = checkpoint.Checkpoints(Path(run_dir) / rundir.CHECKPOINTS)
    step = checkpoints.latest()
    if step is None:
        raise checkpoint.CheckpointError(f"no complete checkpoint in {checkpoints.directory}: nothing to evaluate")
    template = jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), abstract)
    say(f"restoring the checkpoint at update {step} from {checkpoints.path(step)} ...")
    start = time.perf_counter()
    state = jax.tree.map(lambda x: np.asarray(x)[0], checkpoints.restore(step, template).state)  # device 0's row
    say(f"restored in {time.perf_counter() - start:.1f}s")
    agent_state = state.agent
    if state.population is not None:  # the member's values as they were at the checkpoint (PBT may have moved them)
        agent_state = jax.tree.map(lambda x: x[slot], agent_state)
        config = config.replace(**{name: float(v[slot]) for name, v in state.population.hparams.items()})
    agent = spec.make(config, env, env_params, num_envs, None)
    return Policy(agent.policy(agent_state, True), agent.initial_carry, meta["run"]["env"], step, slot)


def _make_env(meta: dict):
    import envs

    env_id = meta["run"]["env"]
    if env_id.startswith("<instance"):
        raise ValueError(f"the run trained on an environment instance ({env_id}), which a run dir cannot rebuild: "
                         "evaluate it from Python, or train with an env id (envs.register)")
    return envs.make(env_id)


class Step(NamedTuple):
    """One recorded step of ``make_episodes``; leaves ``[T, N, ...]`` when stacked."""

    state: Any  # the engine env's state the action was taken in
    reward: Any  # [N] or [N, A] the step's reward
    action: Any  # [N, ...] the greedy action
    key: Any  # [N] the key each env's step was given (a replay of the step needs it: JaxMARL's SMAX renderer)


def make_episodes(policy: Policy, env, env_params, num_episodes: int, max_steps: int, record: bool = True):
    """``episodes(key) -> (returns [N], lengths [N], done [N], Step [T, N, ...])``: ``N`` greedy episodes stepped
    ``T = max_steps`` times in one ``lax.scan``; each env's first episode counts (later ones, after the auto-reset,
    are ignored). ``Step.state[t]`` is the state the action of step ``t`` was taken in. With
    ``record=False`` the last output is ``None`` (no ``[T, N]`` copy of the states, which for Craftax's 10,000-step
    limit would not fit in memory)."""
    import jax
    import jax.numpy as jnp

    from rlpar.episodes import own_reward, team_reward

    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def step(carry, _):
        obs, state, agent_carry, key, done, ret, length = carry
        key, key_act, key_step = jax.random.split(key, 3)
        action, agent_carry = policy.fn(agent_carry, obs, key_act)
        keys_step = jax.random.split(key_step, num_episodes)
        next_obs, next_state, reward, terminated, truncated, info = step_envs(keys_step, state, action, env_params)
        reward = own_reward(reward, info)
        running = jnp.logical_not(done)
        ret = ret + jnp.where(running, team_reward(reward), 0.0)  # a team env's [N, A]: the team's sum
        length = length + running.astype(jnp.int32)
        done = done | terminated | truncated
        recorded = Step(state, reward, action, keys_step) if record else None
        return (next_obs, next_state, agent_carry, key, done, ret, length), recorded

    def episodes(key):
        key, key_reset = jax.random.split(key)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key_reset, num_episodes), env_params)
        zeros = jnp.zeros(num_episodes)
        init = (obs, state, policy.initial_carry(num_episodes), key, zeros.astype(bool), zeros,
                zeros.astype(jnp.int32))
        (*_, done, ret, length), trajectory = jax.lax.scan(step, init, None, length=max_steps)
        return ret, length, done, trajectory

    return jax.jit(episodes)


def _max_steps(env, env_params, default: int = 10_000) -> int:
    from envs.adapters import time_limit

    limit = time_limit(env, env_params)
    return default if limit is None else limit


def evaluate(run_dir: str | Path, episodes: int = 10, seed: int = 0, slot: int | str | None = None,
             say: Callable[[str], None] = _quiet) -> Evaluation:
    """Mean and spread of the greedy policy's return over ``episodes`` episodes (``ValueError`` for a bad run dir);
    ``say`` is told of each long step."""
    import jax

    if not isinstance(episodes, int) or episodes <= 0:
        raise ValueError(f"episodes={episodes!r}: must be a positive integer")
    policy = load_policy(run_dir, episodes, slot, say)
    env, env_params = _make_env(rundir.read_meta(run_dir))
    run = make_episodes(policy, env, env_params, episodes, _max_steps(env, env_params), record=False)
    say(f"compiling and running {episodes} greedy episodes of at most {_max_steps(env, env_params)} steps ...")
    start = time.perf_counter()
    returns, lengths, done, _ = jax.device_get(run(jax.random.PRNGKey(seed)))
    say(f"ran the episodes in {time.perf_counter() - start:.1f}s")
    if not np.all(done):
        raise RuntimeError(f"{int(np.sum(~done))} of {episodes} episodes did not end within "
                           f"{_max_steps(env, env_params)} steps")
    return Evaluation(np.asarray(returns), np.asarray(lengths))


def check_gif(run_dir: str | Path, path: str | Path) -> None:
    """Refuse a GIF that cannot be made, before anything runs: an env gymnax cannot draw, a suite env whose
    renderer does not work here, a missing package, a directory that does not exist."""
    import importlib.util

    from envs.suites import suite_of

    env_id = rundir.read_meta(run_dir)["run"]["env"]
    if suite_of(env_id) is not None:
        renderer = _make_env(rundir.read_meta(run_dir))[0].unwrapped
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
              say: Callable[[str], None] = _quiet) -> int:
    """Render the greedy policy's first episode (its first ``max_frames`` steps, if given) to ``path`` with gymnax's
    visualizer or the suite's renderer; returns the frame count. ``on_frame(i, n)`` is called as frame ``i`` of
    ``n`` is drawn; ``say`` is told of each long step (and, without ``on_frame``, of every 50th frame)."""
    import jax

    check_gif(run_dir, path)
    if on_frame is None and say is not _quiet:
        on_frame = _frame_progress(say)
    policy = load_policy(run_dir, 1, slot, say)
    env, env_params = _make_env(rundir.read_meta(run_dir))
    drawer = env.unwrapped
    max_steps = _max_steps(env, env_params)
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


def make_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m rlpar.evaluate``."""
    parser = cli.Parser(prog="python -m rlpar.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", metavar="RUN_DIR",
                        help="a run dir with a checkpoint (python -m rlpar.train ... --run-dir)")
    parser.add_argument("--episodes", type=int, default=10, metavar="N", help="episodes to run (default: 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the environments' resets (default: 0)")
    parser.add_argument("--slot", type=_slot_arg, default=None, metavar="I|best",
                        help="evaluate only slot I of a multi-seed / sweep / population run, or its fittest member "
                             "(best) (default: best for a population run, every slot otherwise)")
    parser.add_argument("--gif", metavar="FILE", help="also render the first episode (of the first slot) to this GIF")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        if args.gif:
            check_gif(args.run_dir, args.gif)  # before the episodes run
        meta = rundir.read_meta(args.run_dir)
        chosen = args.slot if args.slot is not None or not is_population(meta) else "best"
        slots = [resolve_slot(args.run_dir, meta, chosen)] if chosen is not None else list(range(num_slots(meta)))
        for i, slot in enumerate(slots):
            prefix = f"slot {slot} ({i + 1}/{len(slots)}): " if len(slots) > 1 else ""
            result = evaluate(args.run_dir, args.episodes, args.seed, slot, _prefixed(prefix))
            best = " (the fittest member)" if chosen == "best" else ""
            label = f" slot {slot}{best} ({_slot_label(meta, slot)})" if num_slots(meta) > 1 else ""
            print(f"{args.run_dir}{label}: greedy policy, {args.episodes} episodes: return {result.mean:.2f} +- "
                  f"{result.std:.2f} (min {result.returns.min():.2f}, max {result.returns.max():.2f}), "
                  f"mean length {result.lengths.mean():.1f}", flush=True)
        if args.gif:
            say_on_stdout(f"rendering {args.gif} ...")
            frames = write_gif(args.run_dir, args.gif, args.seed, slot=chosen, say=say_on_stdout)
            print(f"wrote {args.gif} ({frames} frames)")
    except (ValueError, RuntimeError) as err:
        return errors.fail(err, 2)
    return 0


def _prefixed(prefix: str) -> Callable[[str], None]:
    """``say_on_stdout`` with every message starting with ``prefix`` (which slot of several is being evaluated)."""
    return lambda message: say_on_stdout(prefix + message)


def _slot_label(meta: dict, slot: int) -> str:
    described = meta["slots"][slot]
    start = " at the start" if meta["run"].get("pbt") else ""  # PBT moves the values; config.json has the first ones
    return ", ".join(f"{k}={v}" for k, v in described.items() if k != "slot") + start


def _slot_arg(text: str) -> int | str:
    if text == "best":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a slot number or best") from None


if __name__ == "__main__":
    sys.exit(main())
