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
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from rlpar.run import rundir
from rlpar.tools import cli, errors
from rlpar.tools.gif import check_gif, write_gif
from rlpar.tools.policy import (Policy, episode_limit, is_population, load_policy, make_env, make_episodes, num_slots,
                                quiet, resolve_slot)

__all__ = ["Evaluation", "Policy", "evaluate", "load_policy", "main", "make_episodes", "write_gif"]


class Evaluation(NamedTuple):
    returns: np.ndarray  # [N] undiscounted return of each episode
    lengths: np.ndarray  # [N] steps of each episode

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))


def evaluate(run_dir: str | Path, episodes: int = 10, seed: int = 0, slot: int | str | None = None,
             say: Callable[[str], None] = quiet) -> Evaluation:
    """Mean and spread of the greedy policy's return over ``episodes`` episodes (``ValueError`` for a bad run dir);
    ``say`` is told of each long step."""
    import jax

    if not isinstance(episodes, int) or episodes <= 0:
        raise ValueError(f"episodes={episodes!r}: must be a positive integer")
    policy = load_policy(run_dir, episodes, slot, say)
    env, env_params = make_env(rundir.read_meta(run_dir))
    run = make_episodes(policy, env, env_params, episodes, episode_limit(env, env_params), record=False)
    say(f"compiling and running {episodes} greedy episodes of at most {episode_limit(env, env_params)} steps ...")
    start = time.perf_counter()
    returns, lengths, done, _ = jax.device_get(run(jax.random.PRNGKey(seed)))
    say(f"ran the episodes in {time.perf_counter() - start:.1f}s")
    if not np.all(done):
        raise RuntimeError(f"{int(np.sum(~done))} of {episodes} episodes did not end within "
                           f"{episode_limit(env, env_params)} steps")
    return Evaluation(np.asarray(returns), np.asarray(lengths))


def say_on_stdout(message: str) -> None:
    """The command line's progress messages: one line each on stdout (stderr is for the one-line error)."""
    print(message, flush=True)


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
    from rlpar.core import platform

    platform.set_runtime_defaults()  # before anything opens a TPU
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
