"""``agents.layers.Dense``'s two paths timed against each other in whole PPO updates: which one pays on this host.

The Dense fast path (``agents.layers.dense``: the kernel gradient from an explicitly transposed input) is taken by
default where XLA:CPU emits AVX-512 code, elsewhere below 1,024 rows (``agents.platform.dense_fast_path``). This
script builds the same PPO
program twice in one process, once with every ``Dense`` on its fast path and once plain (everything else, the unrolled
threefry and the raveled optimizer included, as the switch has it), compiles both, then times ``--updates`` updates of
each in turns (``--rounds`` turns, the median of ``--repeats`` calls in each), so that load on the host falls on both
alike. Reported: each path's median time per update and the median (range) of the per-turn ratios plain / fast (below
1: the plain path is faster), one JSON line per config, with the host's CPU and whether XLA:CPU emits AVX-512 here
(``XLA_FLAGS=--xla_cpu_max_isa=AVX2`` makes an AVX-512 host emit AVX2 code, to measure both ISAs on one host).

    python benchmarks/dense_paths.py                                   # CartPole, PPO defaults (8 envs x 128 steps)
    python benchmarks/dense_paths.py --env Breakout-MinAtar --preset   # the MinAtar preset's MLP of 2 x 256
    python benchmarks/dense_paths.py --num-envs 1024 --out benchmarks/results/dense_paths.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import sys

import common
from thunks import median_seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_ppo_config_arguments(parser)
    parser.add_argument("--updates", type=int, default=5, help="updates per compiled call")
    parser.add_argument("--rounds", type=int, default=7, help="turns of the two paths")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per turn (their median)")
    common.add_out_argument(parser, "dense_paths")
    args = parser.parse_args(argv)
    for name in ("updates", "rounds", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)}: must be at least 1")

    import jax

    from agents import platform
    from agents.ppo import make_ppo
    from rlpar.core.program import make_program

    config, env, env_params = common.ppo_setup(parser, args)
    programs = {}
    for path, fast in (("fast", True), ("plain", False)):
        common.say(f"compiling {args.updates} updates with every Dense on its {path} path")
        # the agent built with every Dense's field set: the layers read agents.layers' own switch, so both programs
        # are traced with the rest of the fast paths as this host has them
        with _dense_path(fast):
            ppo = make_ppo(config, env, env_params, config.num_envs, None)
            program = make_program(ppo, env, env_params, config.num_envs, config.num_steps, None,
                                   collector_unroll=config.collector_unroll)
            state = program.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
            run = jax.jit(lambda s, update=program.update: jax.lax.scan(lambda c, _: (update(c)[0], None), s, None,
                                                                        length=args.updates)[0])
            jax.block_until_ready(run(state))  # traced and compiled inside the block
            if ("custom_vjp" in str(jax.make_jaxpr(run)(state))) != fast:  # the program measured is the one named
                raise RuntimeError(f"the {path} program does not take the Dense {path} path")
        programs[path] = (run, state)
    times = {path: [] for path in programs}
    for turn in range(args.rounds):
        common.say(f"turn {turn + 1}/{args.rounds}")
        for path, (run, state) in programs.items():
            times[path].append(median_seconds(run, state, repeats=args.repeats) / args.updates)
    ratios = [plain / fast for plain, fast in zip(times["plain"], times["fast"])]
    record = {"benchmark": "dense_paths", "env": args.env, "num_envs": config.num_envs, "num_steps": config.num_steps,
              "hidden_sizes": list(config.hidden_sizes), "updates": args.updates, "rounds": args.rounds,
              "fast_ms": round(1e3 * statistics.median(times["fast"]), 3),
              "plain_ms": round(1e3 * statistics.median(times["plain"]), 3),
              "plain_over_fast": round(statistics.median(ratios), 4),
              "plain_over_fast_range": [round(min(ratios), 4), round(max(ratios), 4)],
              "minibatch_rows": config.batch_size // config.num_minibatches, "xla_cpu_avx512": platform.xla_cpu_avx512(),
              "default_path": "fast" if platform.dense_fast_path(rows=config.batch_size // config.num_minibatches)
              else "plain", "command": common.command_line(), **common.host_fields()}
    common.emit(record, args.out)
    common.say(f"{args.env} {config.num_envs} envs: fast {record['fast_ms']} ms, plain {record['plain_ms']} ms per "
               f"update; plain / fast {record['plain_over_fast']:.3f} ({min(ratios):.3f}-{max(ratios):.3f}); "
               f"default here: {record['default_path']}")
    return 0


class _dense_path:
    """Inside the block, every ``agents.layers.Dense`` whose field is ``None`` takes the given path."""

    def __init__(self, fast: bool):
        self.fast = fast

    def __enter__(self):
        from agents import layers

        self.saved = layers.fast_dense
        layers.fast_dense = lambda field, dtype, rows=None, saved=self.saved: saved(
            self.fast if field is None else field, dtype, rows)

    def __exit__(self, *exc):
        from agents import layers

        layers.fast_dense = self.saved


if __name__ == "__main__":
    sys.exit(main())
