"""Where one PPO update's time goes: collect, advantages, shuffles, minibatch steps, the rest; and by kernel kind.

Times, on one device under ``jax.jit`` (compile excluded, median of repeats, ``--updates`` per compiled call):

- ``update``: ``rlpar.core.program.make_program(agent, ...).update`` for the PPO agent (``agents.ppo.make_ppo``), the
  whole per-device step the runner maps: collect, then ``PPO.learn``;
- ``collect``: ``rlpar.core.rollout.make_collector`` with PPO's ``act`` and ``bootstrap``, as the program builds it;
- ``advantages``: the last observation's value and GAE (``agents.advantages.gae``) on one collected batch;
- ``shuffles``: every epoch's permutation (``agents.shuffle.permutation``) and the gathers of the batch into
  minibatches;
- ``minibatch steps``: ``PPO.fit``'s ``update_epochs * num_minibatches`` gradient + optimizer steps (fit's time
  less the shuffles');
- ``rest`` = update less all of the above (batch flattening, loss and episode statistics, advantage moments).

``--kernels``: the update's kernels summed by kind (``thunks.py``: a ``jax.profiler`` trace; XLA:CPU's thunks or an
accelerator's ops), to see what a time is made of (how many copies, sorts, loops); with ``--dump DIR`` also the
compiled update's text, a trace of one call and its accelerator ops per update (``trace_ops.py``). ``--peer rejax``: the same split and kernels of rejax's PPO on the
same config, measured in rejax's environment right after, on the same backend (``peers.py rejax --profile``).

Throughput in FLOP/s: XLA's cost analysis (``compiled.cost_analysis()["flops"]``) of one minibatch gradient
(``PPO.grad``, a loop-free program) and of one acting step (``PPO.act`` on this device's envs) gives the update's
FLOPs (``epochs * minibatches`` gradients, ``num_steps`` acting steps, one bootstrap); divided by the measured times
they give the achieved GFLOP/s, set beside the GFLOP/s of a large float32 and bfloat16 matmul (``jnp.dot`` of 2048^3
on a CPU, 8192^3 on an accelerator: the practical peaks).

    python benchmarks/profile_update.py                    # PPOConfig defaults: 8 envs x 128 steps
    python benchmarks/profile_update.py --kernels --peer rejax
    python benchmarks/profile_update.py --num-envs 1024 --peer rejax
    python benchmarks/profile_update.py --env Breakout-MinAtar --preset   # the env's preset (64 envs x 128 steps)
    python benchmarks/profile_update.py --env Breakout-MinAtar --preset --torso auto --hidden-sizes 128  # convolution
    python benchmarks/profile_update.py --env Breakout-MinAtar --preset --num-envs 1 --force gae_method=associative
"""

from __future__ import annotations

import argparse
import os

import common
from thunks import median_seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.add_ppo_config_arguments(parser)
    parser.add_argument("--updates", type=int, default=10, help="updates per compiled call")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--kernels", action="store_true", help="also the update's kernels by kind (a profiler trace)")
    parser.add_argument("--dump", default="", help="with --kernels: a folder for the update's compiled program "
                        "(update.hlo.txt), a trace of one call (trace/) and its accelerator ops per update by name "
                        "(update_ops.json, trace_ops.py's summary)")
    parser.add_argument("--peer", choices=["rejax"], default=None, help="also rejax's PPO on the same config")
    common.add_force_argument(parser)
    args = parser.parse_args(argv)
    if args.dump and not args.kernels:
        parser.error("--dump writes the kernels' trace: give --kernels with it")
    try:
        forced = common.parse_forcing(args.force)
    except ValueError as err:
        parser.exit(2, f"error: {err}\n")
    common.apply_forcing(forced)  # before anything is traced

    import jax
    import jax.numpy as jnp

    import thunks
    from agents import advantages as adv
    from agents import shuffle
    from agents.ppo import make_ppo
    from agents.ppo.learner import Batch
    from rlpar.core import rollout
    from rlpar.core.program import make_program

    config, env, env_params = common.ppo_setup(parser, args)
    ppo = make_ppo(config, env, env_params, config.num_envs, None)
    program = make_program(ppo, env, env_params, config.num_envs, config.num_steps, None,
                           collector_unroll=config.collector_unroll)
    state = program.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1))  # TrainState(agent: PPOState, rollout)
    k, repeats = args.updates, args.repeats

    def scan(body, carry, length):
        return jax.lax.scan(lambda c, _: (body(c), None), carry, None, length=length)[0]

    progress = common.Rows(6 + args.kernels + (args.peer is not None))
    times = {}
    progress.start(f"compiling and timing {k} whole updates")
    update = jax.jit(lambda s: scan(lambda s: program.update(s)[0], s, k))
    times["update"] = median_seconds(update, state, repeats=repeats) / k

    collect = rollout.make_collector(env, env_params, ppo.act, config.num_steps, bootstrap=ppo.bootstrap,
                                     initial_carry=ppo.initial_carry, unroll=config.collector_unroll)
    progress.start(f"compiling and timing {k} collects")
    collect_k = jax.jit(lambda a, r: scan(lambda r: collect(a, r)[0], r, k))
    times["collect"] = median_seconds(collect_k, state.agent, state.rollout, repeats=repeats) / k

    end, traj = jax.jit(collect)(state.agent, state.rollout)

    def advantages(agent_state):
        last = ppo.bootstrap(agent_state, (), end.obs)
        return adv.gae(traj.reward, traj.extras["value"], traj.terminated, traj.truncated, traj.final, last,
                       config.gamma, config.gae_lambda)

    progress.start("compiling and timing the advantages")
    times["advantages"] = median_seconds(jax.jit(advantages), state.agent, repeats=repeats)

    flat = lambda x: x.reshape((-1,) + x.shape[2:])
    advantage, target = jax.jit(advantages)(state.agent)
    batch = Batch(flat(traj.obs), flat(traj.action), flat(traj.extras["log_prob"]), flat(traj.extras["value"]),
                  flat(advantage), flat(target))
    n = config.batch_size  # one update's batch on this device

    block = shuffle.block_size(n, config.num_envs, config.num_minibatches)

    def shuffles(key, batch):  # as PPO.fit draws and gathers them: every epoch's order, the batch in that order
        orders = shuffle.epoch_orders(key, n, config.update_epochs, block)
        return [jax.tree.map(lambda x: shuffle.minibatches(x, order, config.num_minibatches, block), batch)
                for order in orders]  # one per epoch

    progress.start("compiling and timing the shuffles")
    times["shuffles"] = median_seconds(jax.jit(shuffles), jax.random.PRNGKey(3), batch, repeats=repeats)

    def fit(carry, batch):
        params, opt_state, key = carry
        key, key_fit = jax.random.split(key)
        params, opt_state, _ = ppo.fit(params, opt_state, batch, key_fit, step_rows=config.num_envs)
        return params, opt_state, key

    steps = config.update_epochs * config.num_minibatches
    progress.start(f"compiling and timing {k} updates' minibatch steps")
    fit_k = jax.jit(lambda c, batch: scan(lambda c: fit(c, batch), c, k))  # the batch an argument, not a constant
    times["minibatch steps"] = median_seconds(fit_k, (state.agent.params, state.agent.opt_state,
                                                      jax.random.PRNGKey(3)), batch, repeats=repeats) / k
    times["minibatch steps"] -= times["shuffles"]
    times["rest"] = times["update"] - sum(v for key, v in times.items() if key != "update")

    def flops(fn, *fn_args) -> float:
        return float(jax.jit(fn).lower(*fn_args).compile().cost_analysis()["flops"])

    progress.start("counting FLOPs (XLA's cost analysis) and timing a large matmul")
    minibatch = jax.tree.map(lambda x: x[: n // config.num_minibatches], batch)
    grad_flops = flops(ppo.grad, state.agent.params, minibatch) * steps
    obs = state.rollout.obs
    act_flops = flops(lambda a, o: ppo.act(a, ppo.initial_carry(config.num_envs), o, jax.random.PRNGKey(0)),
                      state.agent, obs) * (config.num_steps + 1)  # + the bootstrap's forward pass
    size = 2048 if jax.default_backend() == "cpu" else 8192  # an accelerator needs a larger product to be busy
    a = jax.random.normal(jax.random.PRNGKey(4), (size, size))
    t_matmul = median_seconds(jax.jit(lambda x: x @ x), a, repeats=args.repeats)
    peak = 2 * size**3 / t_matmul / 1e9  # float32 at JAX's default precision
    t_bf16 = median_seconds(jax.jit(lambda x: x @ x), a.astype(jnp.bfloat16), repeats=args.repeats)
    peak_bf16 = 2 * size**3 / t_bf16 / 1e9
    kinds = None
    if args.kernels:
        progress.start("tracing the update's kernels")
        kinds = thunks.by_kind(update, (state,))
        kinds = {kind: (ms / k, count / k) for kind, (ms, count) in kinds.items()}
        if args.dump:
            import json

            import trace_ops

            os.makedirs(args.dump, exist_ok=True)
            with open(os.path.join(args.dump, "update.hlo.txt"), "w") as f:
                f.write(update.lower(state).compile().as_text())
            trace_dir = os.path.join(args.dump, "trace")  # trace_ops.py reads it (on an accelerator)
            jax.profiler.start_trace(trace_dir)
            jax.block_until_ready(update(state))
            jax.profiler.stop_trace()
            ops = trace_ops.ops_per_update(trace_dir, k)
            with open(os.path.join(args.dump, "update_ops.json"), "w") as f:
                json.dump({"updates": k, "ops": ops, **trace_ops.summary(ops)}, f)
    peer = None
    if args.peer:
        import peers

        progress.start(f"{args.peer}: the same split on the same config, in its own environment")
        peer = peers.run_peer(args.peer, ["--profile", "--env", args.env, "--num-envs", str(config.num_envs),
                                          "--num-steps", str(config.num_steps), "--repeats", str(repeats),
                                          "--update-epochs", str(config.update_epochs),
                                          "--num-minibatches", str(config.num_minibatches),
                                          "--hidden-sizes", ",".join(map(str, config.hidden_sizes)),
                                          "--activation", config.activation],
                               # the backend rlpar was measured on, unless $REJAX_JAX_PLATFORMS names one
                               platforms=os.environ.get("REJAX_JAX_PLATFORMS") or jax.devices()[0].platform)
    print(common.host_line(), flush=True)
    if forced:
        print(f"forced: {forced}")
    print(f"{args.env}, torso {config.torso}, hidden {config.hidden_sizes}, {config.num_envs} envs x {config.num_steps} steps, {config.update_epochs} epochs x "
          f"{config.num_minibatches} minibatches of {n // config.num_minibatches}, backend {jax.devices()[0].platform}")
    header = f"{'':18s}{'rlpar ms':>10s}{'share':>8s}" + (f"{args.peer + ' ms':>12s}{'share':>8s}{'rlpar/peer':>12s}"
                                                         if peer else "")
    print(header)
    for name, t in times.items():
        line = f"{name:18s}{1e3 * t:10.2f}{100 * t / times['update']:7.1f}%"
        if peer:
            p = peer["ms"][name.replace(" ", "_")]
            line += f"{p:12.2f}{100 * p / peer['ms']['update']:7.1f}%{1e3 * t / p:12.2f}" if p > 0 else f"{p:12.2f}"
        print(line)
    print(f"rlpar: {config.batch_size / times['update']:,.0f} env steps/s" +
          (f"; {args.peer}: {config.batch_size / peer['ms']['update'] * 1e3:,.0f}; rlpar is "
           f"{peer['ms']['update'] / (1e3 * times['update']):.2f}x as fast" if peer else ""))
    print(f"FLOPs per update: {steps} grad steps {grad_flops / 1e9:.2f} G, acting {act_flops / 1e9:.3f} G; achieved: "
          f"whole update {(grad_flops + act_flops) / times['update'] / 1e9:.1f} GFLOP/s; float32 matmul {size}^3 here: "
          f"{peak:.1f} GFLOP/s (update at {100 * (grad_flops + act_flops) / times['update'] / 1e9 / peak:.0f}% of it); "
          f"bfloat16: {peak_bf16:.1f} GFLOP/s ({100 * (grad_flops + act_flops) / times['update'] / 1e9 / peak_bf16:.0f}%)")
    for label, found in (("rlpar", kinds), (args.peer, peer and {k: tuple(v) for k, v in peer["kernels"].items()})):
        if found:
            print(f"{label}: kernels of one update by kind (share of traced time, count)")
            for line in thunks.table(found):
                print("  " + line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
