"""Does a slot compute what the one-slot program computes? PPO's update on this backend, part by part: each part runs
as the single program and vmapped over copies of the same inputs (the slots' axis), and again on the CPU as the
reference; printed per part, the largest difference of the outputs from the single program's, absolute and relative
to the output's largest value (with the leaf where the relative one is), and the same for the CPU's; for ``fit`` also
the first minibatch step whose loss statistics part from the single program's (``first_step_apart``).

The inputs come from the accelerator preset's program after ``--warm-updates`` updates: its state, one collected
batch, one minibatch, its gradient. The copies are stacked on the host, so the compiler cannot see that they are
equal. Parts: ``shuffles`` (every epoch's permutation and minibatch advantage moments), ``grad`` (one minibatch's
gradient), ``optimizer`` (one clipped Adam step), ``fit`` (the update's epochs of minibatch steps on one batch),
``collect`` (one rollout from the state: sampled actions, env states) and ``update`` (collect and learn).

    python benchmarks/slot_parity.py --env Breakout-MinAtar --warm-updates 30 --copies 1,2,6
"""

from __future__ import annotations

import argparse
import sys

import common  # also puts the repository root on sys.path
from common import emit


def _leaves(tree) -> list:
    """``(path, array)`` for each leaf of ``tree``, on the host."""
    import jax
    import numpy as np

    flat, _ = jax.tree_util.tree_flatten_with_path(jax.device_get(tree))
    return [(jax.tree_util.keystr(path), np.asarray(x)) for path, x in flat]


def difference(a, b) -> dict:
    """The largest ``|a - b|`` over the leaves of two like trees, and that over the largest ``|a|`` of its leaf
    (``worst_leaf``: the path of the leaf with the largest such relative gap; a leaf's scale is floored at 1e-6, so a
    leaf of near-zero values, a first step's KL, does not dominate); integer and boolean leaves count their differing
    elements instead."""
    import numpy as np

    worst, relative, differing, worst_leaf = 0.0, 0.0, 0, ""
    for (path, x), (_, y) in zip(_leaves(a), _leaves(b)):
        if np.issubdtype(x.dtype, np.floating):
            gap = float(np.max(np.abs(x.astype(np.float64) - y))) if x.size else 0.0
            worst = max(worst, gap)
            leaf_relative = gap / max(float(np.max(np.abs(x))) if x.size else 0.0, 1e-6)
            if leaf_relative > relative:
                relative, worst_leaf = leaf_relative, path
        else:
            differing += int(np.sum(x != y))
    return {"max_abs": worst, "max_rel": relative, "worst_leaf": worst_leaf, "other_elements_differing": differing}


def first_step_apart(a, b, tolerance: float = 1e-3):
    """For ``fit``'s per-step loss statistics (leaves ``[E, M]``): the first step (in order, epoch-major) at which
    some statistic of ``b`` differs from ``a``'s by more than ``tolerance`` times that statistic's largest ``|a|``
    over the steps (its scale: a statistic near zero at some step, as ``approx_kl`` at the first, is not held to its
    own value there), or ``None``."""
    import numpy as np

    gaps = None
    for (_, x), (_, y) in zip(_leaves(a), _leaves(b)):
        x, y = x.astype(np.float64).reshape(-1), np.asarray(y, np.float64).reshape(-1)
        gap = np.abs(x - y) / max(float(np.max(np.abs(x))) if x.size else 0.0, 1e-12)
        gaps = gap if gaps is None else np.maximum(gaps, gap)
    if gaps is None:  # no statistics
        return None
    over = np.nonzero(gaps > tolerance)[0]
    return int(over[0]) if over.size else None


def stacked(tree, copies: int):
    """``copies`` copies of ``tree``'s leaves stacked on a new leading axis, made on the host."""
    import jax
    import numpy as np

    host = jax.device_get(tree)
    return jax.tree.map(lambda x: np.stack([np.asarray(x)] * copies), host)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="Breakout-MinAtar")
    parser.add_argument("--num-envs", type=int, default=0, help="0: the preset's")
    parser.add_argument("--num-steps", type=int, default=0, help="0: the preset's")
    parser.add_argument("--warm-updates", type=int, default=30, help="updates before the inputs are taken")
    parser.add_argument("--copies", default="2,6", help="comma list of slot counts to vmap over")
    common.add_out_argument(parser, "slot_parity")
    args = parser.parse_args(argv)
    try:
        copies = sorted({int(c) for c in args.copies.split(",")})
        if min(copies) < 1:
            raise ValueError
    except ValueError:
        parser.exit(2, f"error: --copies {args.copies!r}: expected a comma list of positive integers, e.g. 2,6\n")

    import jax
    import jax.numpy as jnp

    import agents.ppo
    import envs
    from agents import shuffle
    from agents.optim import make_optimizer
    from agents.ppo import Batch, PPOConfig
    from agents.ppo.learner import epoch_shuffles
    from agents.advantages import gae
    from rlpar.core import program, rollout

    try:
        env, env_params = envs.make(args.env)
        config = PPOConfig.for_env(args.env)
        config = config.replace(num_envs=args.num_envs or config.num_envs,
                                num_steps=args.num_steps or config.num_steps).validate()
    except ValueError as err:
        parser.exit(2, f"error: {err}\n")
    n = config.num_envs
    agent = agents.ppo.SPEC.make(config, env, env_params, n, None)
    prog = program.make_program(agent, env, env_params, n, config.num_steps, None,
                                collector_unroll=config.collector_unroll)
    state = jax.jit(prog.init)(*jax.random.split(jax.random.PRNGKey(0)))
    update = jax.jit(prog.update)
    for _ in range(args.warm_updates):
        state, _ = update(state)
    collect = rollout.make_collector(env, env_params, agent.act, config.num_steps, bootstrap=agent.bootstrap,
                                     initial_carry=agent.initial_carry, unroll=config.collector_unroll)

    def batch_of(agent_state, rollout_state):
        end, traj = collect(agent_state, rollout_state)
        advantage, target = gae(traj.reward, traj.extras["value"], traj.terminated, traj.truncated, traj.final,
                                agent.bootstrap(agent_state, (), end.obs), config.gamma, config.gae_lambda)
        flat = lambda x: x.reshape((-1,) + x.shape[2:])  # noqa: E731
        return Batch(flat(traj.obs).astype(jnp.float32), flat(traj.action), flat(traj.extras["log_prob"]),
                     flat(traj.extras["value"]), flat(advantage), flat(target))

    batch, step_rows = jax.jit(batch_of)(state.agent, state.rollout), n  # flat index = t * n + env
    key = jax.random.PRNGKey(1)
    rows = batch.advantage.shape[0] // config.num_minibatches
    minibatch = jax.tree.map(lambda x: x[:rows], batch)
    params, opt_state = state.agent.params, state.agent.opt_state
    grads, _ = jax.jit(agent.grad)(params, minibatch)
    tx = make_optimizer(config.lr, config.max_grad_norm, config.num_gradient_steps if config.anneal_lr else None)
    block = shuffle.block_size(batch.advantage.shape[0], step_rows, config.num_minibatches)

    parts = {
        "shuffles": (lambda adv, k: epoch_shuffles(config, adv, k, None, block), (batch.advantage, key)),
        "grad": (agent.grad, (params, minibatch)),
        "optimizer": (lambda g, o, p: tx.update(g, o, p), (grads, opt_state, params)),
        "fit": (lambda p, o, b, k: agent.fit(p, o, b, k, step_rows=step_rows), (params, opt_state, batch, key)),
        "collect": (collect, (state.agent, state.rollout)),
        "update": (prog.update, (state,)),
    }
    cpu = jax.devices("cpu")[0]
    backend = jax.default_backend()
    print(f"{args.env}, {n} envs x {config.num_steps} steps, after {args.warm_updates} updates, on {backend} "
          f"(the reference: the CPU); block {block}", flush=True)
    for name, (fn, inputs) in parts.items():
        single = jax.jit(fn)(*inputs)
        row = {"part": name}
        with jax.default_device(cpu):
            on_cpu = jax.jit(fn)(*jax.device_put(jax.device_get(inputs), cpu))
        row["cpu_vs_single"] = difference(single, on_cpu)
        apart = {"cpu": on_cpu}  # fit's per-step loss statistics (its third output), compared below
        for count in copies:
            out = jax.jit(jax.vmap(fn))(*stacked(inputs, count))
            slot0 = jax.tree.map(lambda x: x[0], out)
            row[f"vmap{count}_slot0_vs_single"] = difference(single, slot0)
            row[f"vmap{count}_slot0_vs_cpu"] = difference(on_cpu, slot0)
            apart[f"vmap{count}"] = slot0
        if name == "fit":
            row["first_step_apart"] = {k: first_step_apart(single[2], out[2]) for k, out in apart.items()}
        text = "  ".join(f"{k} {v['max_abs']:.2e} ({v['max_rel']:.1e} rel at {v['worst_leaf'] or '-'}, "
                         f"{v['other_elements_differing']} int)"
                         for k, v in row.items() if isinstance(v, dict) and "max_abs" in v)
        if "first_step_apart" in row:
            text += f"  first step apart {row['first_step_apart']}"
        print(f"{name:9s} {text}", flush=True)
        emit(common.record("slot_parity", env=args.env, num_envs=n, num_steps=config.num_steps,
                           warm_updates=args.warm_updates, backend=backend, **row), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
