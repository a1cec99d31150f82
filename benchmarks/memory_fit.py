"""How an agent's memory grows with envs (and steps, and slots), and the largest env count that fits one device.

For each env count (doubling from ``--start``) one update of the training program (``rlpar.core.program.make_program``:
collect, then the agent's ``learn``, as a run compiles it) is compiled for this device, never run, and XLA's
compiled memory analysis read: arguments (the training state), outputs, temporaries and generated code. The first
count whose compile fails (XLA refuses a program that cannot fit: ``RESOURCE_EXHAUSTED``) or whose total passes the
device's memory ends the doubling; the counts between the last fit and that one are then halved down to
``--resolution``. ``--slots N`` vmaps the update over N slots, as ``--num-seeds``/``--sweep`` do.

    python benchmarks/memory_fit.py --agent ppo --env CartPole-v1
    python benchmarks/memory_fit.py --agent ppo --env Breakout-MinAtar --num-steps 128
    python benchmarks/memory_fit.py --agent ippo --env marl-MPE_simple_spread_v3
"""

from __future__ import annotations

import argparse
import time

import common  # also puts the repository root on sys.path
from common import command_line, emit, platform_fields

MIB = 2 ** 20


def analyse(spec, config, env, env_params, num_envs: int, slots: int) -> dict:
    """Compile one update for ``num_envs`` envs (``slots`` of them vmapped); its memory in bytes, or the error."""
    import jax

    from rlpar.tools import errors
    from rlpar.core.program import make_program

    config = config.replace(num_envs=num_envs, total_timesteps=num_envs * config.num_steps)
    agent = spec.make(config, env, env_params, num_envs, None)
    program = make_program(agent, env, env_params, num_envs, config.num_steps, None,
                           collector_unroll=getattr(config, "collector_unroll", 0))

    def init(key):
        return program.init(key, key)

    def update(state):
        return program.update(state)[0]

    keys = jax.random.split(jax.random.PRNGKey(0), slots)
    if slots > 1:
        init, update = jax.vmap(init), jax.vmap(update)
    else:
        keys = keys[0]
    start = time.perf_counter()
    try:
        state_shape = jax.eval_shape(init, keys)
        compiled = jax.jit(update, donate_argnums=0).lower(state_shape).compile()
    except Exception as err:  # noqa: BLE001 - XLA's own error types differ by backend
        fit = errors.out_of_memory(err, f"{num_envs} envs x {config.num_steps} steps")
        return {"fits": False, "error": str(fit or errors.one_line(err, 300)), "compile_s": time.perf_counter() - start}
    memory = compiled.memory_analysis()
    fields = {name: int(getattr(memory, f"{name}_size_in_bytes", 0) or 0)
              for name in ("argument", "output", "temp", "alias", "generated_code")}
    fields["total"] = (fields["argument"] + fields["output"] - fields["alias"] + fields["temp"]
                       + fields["generated_code"])
    return {"fits": True, **{f"{k}_mib": round(v / MIB, 2) for k, v in fields.items()},
            "total_bytes": fields["total"], "compile_s": round(time.perf_counter() - start, 2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agent", default="ppo", help="an agent name of rlpar.train (ppo, ippo, pqn, ...)")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-steps", type=int, default=None, help="steps per env per update (default: preset's)")
    parser.add_argument("--slots", type=int, default=1, help="slots vmapped (seeds x swept values)")
    parser.add_argument("--start", type=int, default=1024, help="first env count")
    parser.add_argument("--stop", type=int, default=1 << 24, help="largest env count tried")
    parser.add_argument("--resolution", type=float, default=0.125,
                        help="halve between the last fit and the first miss until they are this close (a fraction)")
    parser.add_argument("--memory-gib", type=float, default=None,
                        help="the device's memory (default: what JAX reports; a CPU reports none: then --stop ends)")
    common.add_out_argument(parser, "memory_fit")
    args = parser.parse_args(argv)

    import jax

    import envs
    from rlpar.tools import registry

    try:  # an unknown agent or env: one line, before anything compiles
        spec = registry.get(args.agent)
        for_env = getattr(spec.config_cls, "for_env", None)
        config = for_env(args.env) if for_env else spec.config_cls()
        if args.num_steps:
            config = config.replace(num_steps=args.num_steps)
        env, env_params = envs.make(args.env)
    except ValueError as err:
        parser.exit(2, f"error: {err}\n")
    fields = platform_fields(jax.devices()[:1])
    limit = (args.memory_gib * 2 ** 30 if args.memory_gib else fields.get("device_memory_bytes")) or float("inf")
    base = {"benchmark": "memory_fit", "agent": args.agent, "env": args.env, "num_steps": config.num_steps,
            "slots": args.slots, "device_limit_mib": None if limit == float("inf") else round(limit / MIB),
            **fields, "command": command_line()}

    def measure(num_envs: int) -> bool:
        record = analyse(spec, config, env, env_params, num_envs, args.slots)
        record["fits"] = record["fits"] and record["total_bytes"] <= limit
        emit({**base, "num_envs": num_envs, **record}, args.out)
        return record["fits"]

    fit, miss, n = 0, None, args.start
    while n <= args.stop:
        if not measure(n):
            miss = n
            break
        fit, n = n, n * 2
    while miss is not None and fit and (miss - fit) / fit > args.resolution:
        middle = (fit + miss) // 2
        if measure(middle):
            fit = middle
        else:
            miss = middle
    emit({**base, "largest_fit": fit, "first_miss": miss}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
