"""IPPO on MPE simple spread: rlpar against JaxMARL's own baseline script, same config, each in a fresh process.

- ``jaxmarl``: JaxMARL's ``baselines/IPPO/ippo_ff_mpe.py`` from a JaxMARL checkout (``--jaxmarl-script``; the
  baselines are not in the pip package), its ``make_train`` run as its ``main`` runs it (``jax.vmap`` over seeds of
  ``jax.jit(train)``), its yaml config with ``NUM_ENVS``, ``TOTAL_TIMESTEPS``, ``NUM_SEEDS`` and ``SEED`` replaced.
  Its per-update logging callback (``jax.experimental.io_callback`` to ``wandb.log``) is left out of the traced
  program, as rlpar's run logs nothing inside its program (``--keep-jaxmarl-callback`` keeps it, to measure what it
  costs); ``hydra``, ``omegaconf`` and ``wandb``, only imported for ``main``, are stood in for when not installed.
- ``rlpar``: ``agents.team.train_ippo`` on ``marl-MPE_simple_spread_v3`` with the env's preset (JaxMARL's
  ``ippo_ff_mpe`` values, ``agents/team/presets.py``; on the CLI the flags of ``docs/multi-agent.md``) and the same
  env count, budget and seeds, sampling single rows as JaxMARL does (``shuffle_block=1``): the ratio's side;
- ``rlpar-default``: the same with rlpar's own minibatch layout for the backend (blocks of rows on an accelerator),
  a row of its own (``--sides rlpar,rlpar-default,jaxmarl``).

Each side reports its compile time and its SPS (team env steps x seeds per second of the compiled program's run,
compilation apart), and the wall time of its process. Sides alternate for ``--rounds`` (3); the ratio rlpar / jaxmarl
is the median of the rounds' ratios.

    python benchmarks/marl_vs_jaxmarl.py --jaxmarl-script ~/JaxMARL/baselines/IPPO/ippo_ff_mpe.py \\
        --num-envs 1024 --total-timesteps 20000000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import types
from pathlib import Path

import common  # also puts the repository root on sys.path
from common import emit, platform_fields

ENV_ID = "marl-MPE_simple_spread_v3"
SIDES = ("rlpar", "rlpar-default", "jaxmarl")


def _stand_in(name: str, **attributes) -> None:
    """Put a module named ``name`` with ``attributes`` in ``sys.modules`` unless the real one imports."""
    try:
        __import__(name)
    except ImportError:
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        sys.modules[name] = module


def _no_op(*args, **kwargs):
    return None


def load_jaxmarl_script(path: Path):
    """JaxMARL's script as a module, with stand-ins for what only its ``main`` uses."""
    _stand_in("hydra", main=lambda **kwargs: (lambda function: function))
    _stand_in("omegaconf", OmegaConf=types.SimpleNamespace(to_container=lambda config: dict(config)))
    _stand_in("wandb", log=_no_op, init=_no_op, Table=_no_op, plot=types.SimpleNamespace(line=_no_op))
    spec = importlib.util.spec_from_file_location("jaxmarl_ippo_ff_mpe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def jaxmarl_config(script: Path, num_envs: int, total: int, seeds: int, seed: int) -> dict:
    import yaml

    config = yaml.safe_load((script.parent / "config" / f"{script.stem}.yaml").read_text())
    config.update(NUM_ENVS=num_envs, TOTAL_TIMESTEPS=total, NUM_SEEDS=seeds, SEED=seed)
    return config


def run_jaxmarl(args) -> dict:
    import jax
    import jax.experimental

    script = Path(args.jaxmarl_script).expanduser().resolve()
    config = jaxmarl_config(script, args.num_envs, args.total_timesteps, args.num_seeds, args.seed)
    module = load_jaxmarl_script(script)
    module.wandb.init(project=config["PROJECT"], mode=config["WANDB_MODE"])  # as its main does
    keys = jax.random.split(jax.random.PRNGKey(config["SEED"]), config["NUM_SEEDS"])
    if not args.keep_jaxmarl_callback:  # traced to nothing: this process only runs JaxMARL's program
        jax.experimental.io_callback = jax.debug.callback = _no_op
    start = time.perf_counter()
    train = jax.jit(jax.vmap(jax.jit(module.make_train(config))))
    compiled = train.lower(keys).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - start
    returns = out["metrics"]["returned_episode_returns"]
    steps = config["NUM_UPDATES"] * config["NUM_ENVS"] * config["NUM_STEPS"] * config["NUM_SEEDS"]
    return {"compile_s": compile_s, "run_s": run_s, "env_steps": steps, "sps": steps / run_s,
            "last_return": float(returns[:, -1].mean()), "logging_callback": bool(args.keep_jaxmarl_callback),
            "sampling": "single rows", "config": {k: v for k, v in config.items()
                                                  if isinstance(v, (int, float, str, bool))}}


def run_rlpar(args) -> dict:
    import agents.team
    from agents.team import TeamConfig

    config = TeamConfig.for_env(ENV_ID).replace(num_envs=args.num_envs, total_timesteps=args.total_timesteps,
                                                seed=args.seed, shuffle_block=1 if args.side == "rlpar" else 0)
    result = agents.team.train_ippo(config, ENV_ID, devices=1, num_seeds=args.num_seeds,
                                    log_every=max(1, config.num_updates // 4), eval_every=0)
    run_s = sum(record["time_s"] for record in result.metrics)
    steps = result.metrics[-1]["env_steps"] * args.num_seeds
    return {"compile_s": result.compile_s, "run_s": run_s, "env_steps": steps, "sps": steps / run_s,
            "last_return": result.metrics[-1].get("episode_return"), "shuffle_block": config.shuffle_block,
            "sampling": "single rows" if config.shuffle_block == 1 else "rlpar's default layout"}


def side(args) -> int:
    import jax

    start = time.perf_counter()
    record = run_jaxmarl(args) if args.side == "jaxmarl" else run_rlpar(args)  # rlpar or rlpar-default
    record.update(program=args.side, wall_s=time.perf_counter() - start, **platform_fields(jax.devices()[:1]))
    print(json.dumps(record), flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jaxmarl-script", required=True,
                        help="JaxMARL's baselines/IPPO/ippo_ff_mpe.py (its config/ippo_ff_mpe.yaml beside it)")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--total-timesteps", type=int, default=20_000_000, help="team env steps per seed")
    parser.add_argument("--num-seeds", type=int, default=1)
    parser.add_argument("--seed", type=int, default=30, help="JaxMARL's config's SEED")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every side, alternating")
    parser.add_argument("--sides", default="rlpar,jaxmarl", help="comma list of rlpar (single rows, the ratio's "
                        "side), rlpar-default (rlpar's own layout), jaxmarl")
    parser.add_argument("--keep-jaxmarl-callback", action="store_true",
                        help="keep JaxMARL's per-update logging callback in its program")
    common.add_out_argument(parser, "marl_vs_jaxmarl")
    parser.add_argument("--side", choices=SIDES, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    script = Path(args.jaxmarl_script).expanduser()
    if not script.is_file() or not (script.parent / "config" / f"{script.stem}.yaml").is_file():
        parser.exit(2, f"--jaxmarl-script {args.jaxmarl_script}: expected JaxMARL's baselines/IPPO/ippo_ff_mpe.py "
                       f"with config/{script.stem}.yaml beside it\n")
    unknown = [name for name in args.sides.split(",") if name not in SIDES]
    if unknown:
        parser.exit(2, f"--sides: {unknown[0]!r} is not a side; expected a comma list of {', '.join(SIDES)}\n")
    if args.side:
        return side(args)
    base = common.record("marl_vs_jaxmarl", env=ENV_ID, num_envs=args.num_envs,
                         total_timesteps=args.total_timesteps, num_seeds=args.num_seeds)
    own = argv if argv is not None else sys.argv[1:]
    sps: dict[str, dict[int, float]] = {}
    for round_, name in common.interleave(args.rounds, args.sides.split(",")):
        done = common.run_fresh([sys.executable, __file__, *own, "--side", name], check=False)
        if not done.records:
            print(f"{name}: no record\n{done.stderr[-3000:]}", file=sys.stderr)
            continue
        record = {**base, **done.records[-1], "round": round_}
        sps.setdefault(name, {})[round_] = record["sps"]
        emit(record, args.out)
    if "rlpar" in sps and "jaxmarl" in sps:
        print(f"rlpar / jaxmarl SPS, both single rows: {common.ratio_text(common.ratio(sps['rlpar'], sps['jaxmarl']))}",
              flush=True)
    if "rlpar-default" in sps and "jaxmarl" in sps:
        print("rlpar's default layout / jaxmarl SPS (not like for like): "
              f"{common.ratio_text(common.ratio(sps['rlpar-default'], sps['jaxmarl']))}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
