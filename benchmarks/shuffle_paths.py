"""PPO's minibatch shuffles timed against each other in whole updates: which permutation pays on this backend.

``agents.shuffle`` draws each epoch's permutation by a Feistel walk (XLA:CPU's fast path) or by sorting random keys
(``jax.random.permutation``, elsewhere). This script builds the same PPO program once per method (``--methods``;
``none`` draws no permutation at all, the batch in its collected order: the floor, not a correct update), compiles
each, then times ``--updates`` updates of each in turns (``--rounds`` turns, the median of ``--repeats`` calls in
each), so that load on the host falls on all alike. Per method: the median time per update, env steps per second,
and the median (range) of the per-turn ratios against the first method listed; one JSON line per method.

    python benchmarks/shuffle_paths.py --num-envs 4096
    python benchmarks/shuffle_paths.py --env Breakout-MinAtar --preset --num-envs 4096 --out results.jsonl
    python benchmarks/shuffle_paths.py --num-envs 4096 --methods sort/1,sort/1/packed,feistel/1/packed,sort/64
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys

import common
from thunks import median_seconds


@contextlib.contextmanager
def _method(spec: str):
    """Programs traced inside the block shuffle by ``spec``: ``feistel`` or ``sort``, optionally ``/BLOCK`` (rows
    of a step moved together, ``agents.shuffle.block_size``; without or empty, the platform's choice) and
    ``/LAYOUT`` (``flat``, the default, ``blocks`` or ``shaped``: ``agents.shuffle.minibatches``; ``+packed``, or
    ``packed`` alone for flat: the batch's leaves gathered as one packed array, ``agents.shuffle.rows_of``), or
    ``none``: no permutation and no gather, the batch cut into minibatches in its collected order."""
    import jax.numpy as jnp

    from agents import shuffle
    from rlpar.core import platform

    name, block, layout, packed = _parts(spec)
    if name != "none":
        with shuffle.using(name, int(block) if block else None, layout or "flat"), \
                platform.forcing(packed_gather=packed):
            yield
        return
    saved = shuffle.permutation, shuffle.minibatches
    shuffle.permutation = lambda key, n: jnp.arange(n, dtype=jnp.int32)
    shuffle.minibatches = lambda x, order, m, block=1: x.reshape((m, x.shape[0] // m, -1))
    try:
        yield
    finally:
        shuffle.permutation, shuffle.minibatches = saved


def _parts(spec: str) -> tuple[str, str, str, bool]:
    """``"sort/64/blocks+packed"`` -> ``("sort", "64", "blocks", True)``; ``"sort/1/packed"``: the flat layout,
    packed (``rlpar.core.platform.packed_gather``)."""
    name, _, block = spec.partition("/")
    block, _, layout = block.partition("/")
    layout, plus, packed = layout.partition("+")
    if layout == "packed" and not plus:
        layout, packed = "", "packed"
    return name, block, layout, packed == "packed"


def _valid(spec: str) -> bool:
    name, block, layout, packed = _parts(spec)
    suffix = spec.rpartition("/")[2]
    return spec == "none" or (name in ("feistel", "sort") and (not block or (block.isdigit() and int(block) >= 1))
                              and layout in ("", "flat", "blocks", "shaped")
                              and (packed or "+" not in suffix) and suffix.count("+") <= 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_ppo_config_arguments(parser)
    parser.add_argument("--methods", default="feistel,sort,none",
                        help="comma list of feistel, sort (each optionally /BLOCK and /LAYOUT, e.g. sort/64, "
                             "sort/64/blocks, sort//shaped, sort/1/packed, sort/64/blocks+packed) and none")
    parser.add_argument("--updates", type=int, default=3, help="updates per compiled call")
    parser.add_argument("--rounds", type=int, default=5, help="turns of the methods")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per turn (their median)")
    common.add_out_argument(parser, "shuffle_paths")
    args = parser.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if not _valid(m):
            parser.error(f"--methods: {m!r} is not one of feistel, sort, feistel/BLOCK, sort/BLOCK, none")

    import jax

    from agents import shuffle
    from agents.ppo import make_ppo
    from rlpar.core.program import make_program

    config, env, env_params = common.ppo_setup(parser, args)
    config = config.replace(total_timesteps=max(config.total_timesteps, config.batch_size * args.updates))
    platform_method = shuffle.method()
    programs, failed, temp = {}, {}, {}
    for name in methods:
        common.say(f"compiling {args.updates} updates with the {name} shuffle")
        with _method(name):
            ppo = make_ppo(config, env, env_params, config.num_envs, None)
            program = make_program(ppo, env, env_params, config.num_envs, config.num_steps, None,
                                   collector_unroll=config.collector_unroll)
            state = program.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
            run = jax.jit(lambda s, update=program.update: jax.lax.scan(lambda c, _: (update(c)[0], None), s, None,
                                                                        length=args.updates)[0])
            try:  # traced and compiled inside the block
                compiled = run.lower(state).compile()
            except Exception as error:  # noqa: BLE001 - e.g. more memory than the device has: say so, go on
                common.say(f"{name}: {str(error).splitlines()[0][:300]}")
                failed[name] = str(error).splitlines()[0][:300]
                continue
            memory = compiled.memory_analysis()
            temp[name] = getattr(memory, "temp_size_in_bytes", None) if memory is not None else None
            jax.block_until_ready(compiled(state))
        programs[name] = (compiled, state)
    times = {name: [] for name in programs}
    for turn in range(args.rounds):
        common.say(f"turn {turn + 1}/{args.rounds}")
        for name, (run, state) in programs.items():
            times[name].append(median_seconds(run, state, repeats=args.repeats) / args.updates)
    reference = next(iter(programs), None)
    host = common.host_fields()
    for name, error in failed.items():
        common.emit({"benchmark": "shuffle_paths", "method": name, "env": args.env, "num_envs": config.num_envs,
                     "error": error, "backend": jax.devices()[0].platform, "command": common.command_line(), **host},
                    args.out)
    for name in programs:
        ratios = [t / r for t, r in zip(times[name], times[reference])]
        ms = 1e3 * statistics.median(times[name])
        with _method(name):
            block = shuffle.block_size(config.batch_size, config.num_envs, config.num_minibatches)
        record = {"benchmark": "shuffle_paths", "method": name, "block": block if name != "none" else None,
                  "platform_method": platform_method, "env": args.env,
                  "num_envs": config.num_envs, "num_steps": config.num_steps, "batch": config.batch_size,
                  "update_epochs": config.update_epochs, "num_minibatches": config.num_minibatches,
                  "hidden_sizes": list(config.hidden_sizes), "update_ms": round(ms, 3),
                  "temp_mib": None if temp.get(name) is None else round(temp[name] / 2 ** 20, 1),
                  "sps": round(config.batch_size / ms * 1e3), f"over_{reference}": round(statistics.median(ratios), 4),
                  f"over_{reference}_range": [round(min(ratios), 4), round(max(ratios), 4)],
                  "backend": jax.devices()[0].platform, "device_kind": jax.devices()[0].device_kind,
                  "jax_version": jax.__version__, "command": common.command_line(), **host}
        common.emit(record, args.out)
        common.say(f"{args.env} {config.num_envs} envs, {name}: {ms:.2f} ms per update, "
                   f"{record['sps'] / 1e6:.2f}M SPS, {statistics.median(ratios):.3f}x {reference}'s time (block {block})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
