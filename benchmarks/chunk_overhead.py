"""What the runner's compiled chunk program costs beyond the bare update: per-update time of each, same process.

- ``bare``: ``program.update`` under ``jax.jit`` + ``lax.scan`` (what ``profile_update.py`` times as ``update``);
- ``bare, metrics kept``: the same returning every update's metrics (which ``bare`` lets XLA drop);
- ``chunk, evaluation branch``: ``program.make_chunk`` under ``jax.jit`` (``fori_loop`` over a traced update count,
  the finiteness flag of ``rlpar.run.guard``, the evaluation's ``lax.cond`` branch not taken);
- ``chunk, no evaluation branch``: the same with the evaluation left out (a program of its own, where
  ``rlpar.core.platform.evaluation_in_chunk`` says so), and the same without the finiteness flag;
- ``chunk under jax.pmap``: the chunk program as the runner builds it (the evaluation where the platform puts it),
  with the device axis named (its collectives over one device), under a plain ``jax.pmap`` on device 0's state;
- ``runner``: the program the runner compiles (``parallel.compile_step`` over one device), called on one state;
- ``runner, donated``: the same compiled with the state donated and each call fed the last one's state (the runner
  donates where ``rlpar.core.platform.donate_state`` says so: ``runner_donates``); then the same with each call's
  metrics read to the host inside the timing, one array after another or all at once.

    python benchmarks/chunk_overhead.py --env Breakout-MinAtar --updates 4
    python benchmarks/chunk_overhead.py --env Breakout-MinAtar --num-envs 1 --num-steps 128 --collector-unroll 2 \
        --updates 10 --only "jit chunk program, evaluation branch;jit chunk program, no evaluation branch"

One JSON line per program (``ms_per_update``, ``sps``); the same as a table on stderr.
"""

from __future__ import annotations

import argparse
import statistics
import time

import common


PROGRAMS = ("bare jit + scan(update)", "the same, metrics kept", "jit chunk program, evaluation branch",
            "jit chunk program, no evaluation branch", "the same, no guard",
            "the runner's chunk program under jax.pmap", "the runner's compiled chunk (pmap, 1 device)",
            "the same, state donated", "the same, metrics read one by one (np.asarray)",
            "the same, metrics read at once (jax.device_get)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Breakout-MinAtar")
    parser.add_argument("--updates", type=int, default=4, help="updates per compiled call")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--num-envs", type=int, default=0, help="0: the preset's")
    parser.add_argument("--num-steps", type=int, default=0, help="0: the preset's")
    parser.add_argument("--collector-unroll", type=int, default=-1, help="-1: the preset's; 0: the backend's choice")
    parser.add_argument("--only", default="", help="';'-separated names of the programs to time (default: all)")
    common.add_force_argument(parser)
    common.add_out_argument(parser, "chunk_overhead")
    args = parser.parse_args(argv)
    only = [name.strip() for name in args.only.split(";") if name.strip()]
    unknown = [name for name in only if name not in PROGRAMS]
    if unknown:
        parser.exit(2, f"error: --only {unknown[0]!r}: expected some of {'; '.join(PROGRAMS)}\n")
    try:
        forced = common.parse_forcing(args.force)
    except ValueError as err:
        parser.exit(2, f"error: {err}\n")
    common.apply_forcing(forced)  # before anything is traced

    import jax
    import numpy as np

    from agents.ppo import PPOConfig
    from rlpar.core import parallel, platform, program
    from rlpar.run import build, chunks, guard, prepare
    from rlpar.run.config import RunConfig
    from rlpar.tools import registry

    k, config = args.updates, PPOConfig.for_env(args.env)
    changes = {"num_envs": args.num_envs, "num_steps": args.num_steps}
    config = config.replace(**{name: value for name, value in changes.items() if value > 0})
    if args.collector_unroll >= 0:
        config = config.replace(collector_unroll=args.collector_unroll)
    config = config.replace(total_timesteps=max(config.total_timesteps, config.batch_size * k))
    run_config = RunConfig(env=args.env, compile_cache="off", log_every=k, devices=1)
    prepared = prepare.prepare_run(registry.get("ppo"), config, run_config, None, None)
    state = build.initial_state(prepared, config, run_config, None)
    schedule = chunks.Schedule([k], 0, run_config.eval_interval(config.num_updates), config.seed)
    control = chunks.chunk_control(schedule, k, 0, False)
    # device 0's state, unmapped, on device 0 (a host array would be copied to the device in every timed call)
    device = prepared.devices[0]
    one = jax.device_put(jax.tree.map(lambda x: np.asarray(x)[0], parallel.rows_to_host(state)), device)
    per_device = prepared.make_program(None)

    def seconds_per_update(fn, *fn_args) -> float:
        jax.block_until_ready(fn(*fn_args))
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            jax.block_until_ready(fn(*fn_args))
            times.append(time.perf_counter() - start)
        return statistics.median(times) / k

    bare = jax.jit(lambda s: jax.lax.scan(lambda c, _: (per_device.update(c)[0], None), s, None, length=k)[0])
    kept = jax.jit(lambda s: jax.lax.scan(lambda c, _: per_device.update(c), s, None, length=k))
    flagged = per_device._replace(update=guard.with_finite_flag(per_device.update, None))
    branch = jax.jit(program.make_chunk(flagged, k))
    no_branch = jax.jit(program.make_chunk(flagged._replace(evaluate=None), k))
    unflagged = jax.jit(program.make_chunk(per_device._replace(evaluate=None), k))

    inside = platform.evaluation_in_chunk(device.platform)
    donates = platform.donate_state(chunks.bytes_per_device(state, len(prepared.devices)), device.platform)
    make_step = chunks.make_steps(prepared, run_config, k, inside)[0]  # the runner's, guard and all
    shared = parallel.replicate(control, prepared.devices)
    axis = parallel.AXIS_NAME
    one_row = jax.device_put(jax.tree.map(lambda x: np.asarray(x)[None], (one, control)), device)  # [1, ...]
    makers = (lambda: (bare, (one,)), lambda: (kept, (one,)), lambda: (branch, (one, control)),
              lambda: (no_branch, (one, control)), lambda: (unflagged, (one, control)),
              lambda: (jax.pmap(make_step(axis), axis_name=axis, devices=[device]), one_row),
              lambda: _compiled(False), lambda: _compiled(True),
              lambda: _compiled(True, lambda tree: jax.tree.map(np.asarray, tree)),
              lambda: _compiled(True, jax.device_get))

    def _compiled(donate: bool, read=None):
        compiled = parallel.compile_step(make_step, prepared.devices, state, shared=shared, donate=donate)
        if not donate:
            return (lambda s: compiled(s, shared)), (state,)
        latest = [jax.tree.map(lambda x: x.copy(), state)]

        def run_donated():  # as the runner calls it: each call donates the state the last one returned
            latest[0], metrics = compiled(latest[0], shared)
            return metrics if read is None else read(metrics)  # read: the metrics to the host, timed too

        return run_donated, ()

    assert len(makers) == len(PROGRAMS)
    programs = [(name, make) for name, make in zip(PROGRAMS, makers) if not only or name in only]
    common.say(common.host_line())
    progress = common.Rows(len(programs))
    rows = []
    for name, make in programs:
        progress.start(f"compiling and timing {name}, {args.repeats} repeats of {k} updates")
        fn, fn_args = make()
        rows.append((name, seconds_per_update(fn, *fn_args)))
    for name, seconds in rows:
        common.emit(common.record("chunk_overhead", program=name, env=args.env, updates_per_call=k,
                                  num_envs=config.num_envs, num_steps=config.num_steps,
                                  collector_unroll=config.collector_unroll, forced=forced, repeats=args.repeats,
                                  platform_evaluation_in_chunk=inside,  # the runner's rows follow it
                                  runner_donates=donates,  # which of the two runner rows the runner runs
                                  ms_per_update=round(seconds * 1000, 3), sps=config.batch_size / seconds), args.out)
    for name, seconds in rows:
        common.say(f"{seconds * 1000:8.1f} ms/update  {config.batch_size / seconds:8.0f} SPS  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
