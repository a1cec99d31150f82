"""Peer PPO implementations measured on this machine, each in its own virtual environment.

Peers are optional extras, never dependencies of rlpar or its tests:

- rejax (JAX, gymnax < 1): ``benchmarks/.peers/rejax-venv``;
- Stable-Baselines3 (PyTorch on CPU, gymnasium CartPole): ``benchmarks/.peers/sb3-venv``.

Usage (from the repository root)::

    python benchmarks/peers.py install                 # create both venvs (minutes; needs the package index)
    python benchmarks/peers.py rejax --total-timesteps 1000000
    python benchmarks/peers.py sb3 --total-timesteps 50000

``rejax`` and ``sb3`` re-run this file with the peer venv's Python (``--inside``), which imports only the peer's
packages (never rlpar: its gymnax is incompatible), trains, and prints one JSON result line. This file therefore
imports nothing but the standard library at the top.

Several rows run in one process when joined by ``--then`` (``peers.py rejax --num-envs 1 --then --num-envs 4096``:
one JSON line each; a TPU costs 10-15 s to open per process). A row whose ``--deadline`` (Unix time) has passed is
not started, and a row that fails does not stop the next: a ``{"not_measured": reason, ...}`` line says so.

A peer can also run from an interpreter and a package folder of your choosing instead of its venv (a machine without
the venvs, where the peer's packages were installed with ``pip install --target DIR``)::

    python benchmarks/peers.py rejax --python python3 --site DIR --platforms cuda
    REJAX_PYTHON=python3 REJAX_SITE=DIR python benchmarks/train_vs_peer.py ...   # the same for every script

``--site`` (``<PEER>_SITE``) is the peer's whole ``PYTHONPATH``. The peer runs on JAX's CPU backend unless
``--platforms`` (``<PEER>_JAX_PLATFORMS``) names another, as ``JAX_PLATFORMS`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PEERS_DIR = Path(__file__).resolve().parent / ".peers"

# What each venv gets. rejax 0.1.x unpacks gymnax 0.0.x's five-value step, so it needs gymnax < 1; jax is pinned to
# the version rlpar is measured with where that resolves, so both JAX engines run the same compiler.
PEER_PACKAGES = {
    "rejax": ["rejax==0.1.3", "gymnax<1"],
    "sb3": ["torch==2.13.0", "stable-baselines3", "gymnasium"],
}


def venv_python(peer: str) -> Path:
    return PEERS_DIR / f"{peer}-venv" / "bin" / "python"


def peer_python(peer: str, python: str | None = None) -> str:
    """The interpreter that runs ``peer``: ``python`` if given, else ``$<PEER>_PYTHON``, else its venv's."""
    return python or os.environ.get(f"{peer.upper()}_PYTHON") or str(venv_python(peer))


def install(peer: str, jax_version: str | None) -> None:
    """Create ``.peers/<peer>-venv`` (if missing) and pip-install the peer's packages into it."""
    venv = PEERS_DIR / f"{peer}-venv"
    if not venv_python(peer).exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    packages = list(PEER_PACKAGES[peer])
    if peer == "rejax" and jax_version:
        packages += [f"jax=={jax_version}", f"jaxlib=={jax_version}"]
    print(f"[peers] installing into {venv}: {' '.join(packages)}", flush=True)
    result = subprocess.run([str(venv_python(peer)), "-m", "pip", "install", "-q", *packages])
    if result.returncode and peer == "rejax" and jax_version:
        print("[peers] rejax with the same jax failed to resolve; retrying with pip's choice of jax", flush=True)
        subprocess.run([str(venv_python(peer)), "-m", "pip", "install", "-q", *PEER_PACKAGES[peer]], check=True)
    elif result.returncode:
        raise SystemExit(f"[peers] pip install failed for {peer}")


def installed(peer: str, python: str | None = None) -> bool:
    """Whether ``peer``'s interpreter exists (a venv's path, or a command on ``PATH`` such as ``python3``)."""
    import shutil

    chosen = peer_python(peer, python)
    return Path(chosen).exists() or shutil.which(chosen) is not None


# ---------------------------------------------------------------------------------------------------------------
# The code below runs inside a peer venv.


def _rejax_config(args) -> tuple[str, dict]:
    """rejax's algorithm class name and ``create`` arguments for ``--algo``, from the shared flags."""
    common = dict(env=args.env, num_envs=args.num_envs, learning_rate=args.lr, max_grad_norm=args.max_grad_norm,
                  total_timesteps=args.total_timesteps, gamma=args.gamma,
                  eval_freq=args.total_timesteps,  # one training chunk, no evaluation in between
                  skip_initial_evaluation=True)
    hidden = tuple(int(h) for h in args.hidden_sizes.split(","))
    epsilon = dict(eps_start=args.eps_start, eps_end=args.eps_end, exploration_fraction=args.exploration_fraction)
    replay = dict(buffer_size=args.buffer_size, fill_buffer=args.fill_buffer, batch_size=args.batch_size,
                  num_epochs=args.update_epochs, target_update_freq=args.target_update_freq, polyak=args.polyak)
    if args.algo == "ppo":
        return "PPO", dict(common, num_steps=args.num_steps, num_epochs=args.update_epochs,
                           num_minibatches=args.num_minibatches, gae_lambda=args.gae_lambda, clip_eps=args.clip_eps,
                           vf_coef=args.vf_coef, ent_coef=args.ent_coef,
                           agent_kwargs={"activation": args.activation, "hidden_layer_sizes": hidden})
    if args.algo == "pqn":  # rejax fixes PQN's and DQN's network at (64, 64); its PQN at relu(LayerNorm(x))
        return "PQN", dict(common, num_steps=args.num_steps, num_epochs=args.update_epochs,
                           num_minibatches=args.num_minibatches, td_lambda=args.td_lambda, **epsilon)
    if args.algo == "dqn":
        return "DQN", dict(common, ddqn=True, agent_kwargs={"activation": args.activation}, **epsilon, **replay)
    if args.algo == "sac":
        return "SAC", dict(common, hidden_layer_sizes=hidden, agent_kwargs={"activation": args.activation}, **replay)
    raise SystemExit(f"--algo={args.algo!r}: one of ppo, pqn, dqn, sac")


def _rejax_main(args) -> dict:
    """Train rejax's ``--algo`` on the given config; time it without compilation."""
    import jax
    import rejax

    name, config = _rejax_config(args)
    algo = getattr(rejax, name).create(**config)
    evaluate = algo.eval_callback
    timed = algo.replace(eval_callback=lambda algo, ts, rng: ())  # no evaluation inside the timed program
    train = jax.jit(timed.train)

    key = jax.random.PRNGKey(args.seed)
    start, cpu_start = time.perf_counter(), time.process_time()
    lowered = train.lower(key)
    lower_s = time.perf_counter() - start
    compiled = lowered.compile()
    compile_s = time.perf_counter() - start  # lowering included, as rlpar's "compiled in" figure
    compile_cpu_s = time.process_time() - cpu_start
    times, ts = [], None
    for repeat in range(args.repeats):
        start = time.perf_counter()
        ts, _ = jax.block_until_ready(compiled(jax.random.PRNGKey(args.seed + repeat)))
        times.append(time.perf_counter() - start)
    lengths, returns = evaluate(algo, ts, jax.random.PRNGKey(123))
    per_iteration = args.num_envs * (args.num_steps if args.algo in ("ppo", "pqn") else 1)
    steps = _rounded_steps(args.total_timesteps, per_iteration, round_up=True)  # rejax: np.ceil
    device = jax.devices()[0]
    return {
        "peer": "rejax",
        "algo": args.algo,
        "peer_version": _version("rejax"),
        "jax_version": jax.__version__,
        "backend": device.platform,
        "device_kind": device.device_kind,
        "num_devices": 1,
        "compile_s": compile_s,
        "compile_cpu_s": compile_cpu_s,
        "lower_s": lower_s,
        "stablehlo_lines": len(lowered.as_text().splitlines()),
        "hlo_lines": len(compiled.as_text().splitlines()),
        "final_return": float(returns.mean()),
        **_sps_fields(steps, times),
    }


def _rejax_learning(args) -> dict:
    """Train rejax's PPO on ``--seeds`` seeds (vmapped, one program) with a greedy evaluation of
    ``--eval-episodes`` episodes every ``--eval-freq`` env steps; per seed the evaluation curve, the final greedy
    return and the time to ``--target`` (compilation included; training time prorated by steps, as one compiled
    program has no per-chunk clock)."""
    import jax
    import jax.numpy as jnp
    import rejax
    from rejax.evaluate import evaluate

    name, config = _rejax_config(args)
    if name != "PPO":
        raise SystemExit("--seeds/--eval-freq: rejax PPO only")
    algo = getattr(rejax, name).create(**dict(config, eval_freq=args.eval_freq))
    env, env_params = algo.env, algo.env_params

    def greedy(algo, ts, rng):  # rejax's own callback samples actions; this one takes the distribution's mode
        def act(obs, rng):
            dist = algo.actor.apply(ts.actor_ts.params, obs[None], method="_action_dist")
            return jnp.squeeze(dist.mode())

        return evaluate(act, rng, env, env_params, args.eval_episodes, env_params.max_steps_in_episode)

    train = jax.jit(jax.vmap(algo.replace(eval_callback=greedy).train))
    keys = jax.random.split(jax.random.PRNGKey(args.seed), args.seeds)
    start = time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    _, (lengths, returns) = jax.block_until_ready(compiled(keys))
    train_s = time.perf_counter() - start
    curve = returns.mean(axis=-1).tolist()  # [seeds][evaluations]
    evals = len(curve[0])
    to_target = [next((compile_s + train_s * (i + 1) / evals for i, r in enumerate(seed) if r >= args.target), None)
                 for seed in curve]
    return {"peer": "rejax", "algo": args.algo, "peer_version": _version("rejax"), "jax_version": jax.__version__,
            "seeds": args.seeds, "eval_episodes": args.eval_episodes, "eval_freq": args.eval_freq,
            "compile_s": compile_s, "train_s": train_s, "greedy_curve": curve,
            "final_greedy_returns": [seed[-1] for seed in curve], "target": args.target,
            "time_to_target_s": to_target}


def _rejax_profile(args) -> dict:
    """One rejax PPO update on the given config split as ``profile_update.py`` splits rlpar's: milliseconds per
    update of the whole ``train_iteration``, the collect, the advantages (last value and GAE), the shuffles (every
    epoch's permutation and minibatch gathers), the minibatch steps (gradient and optimizer, both networks) and the
    rest; then the update's kernels by kind (``thunks.py``)."""
    import jax

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import thunks
    import rejax
    from rejax.algos.ppo import AdvantageMinibatch

    name, config = _rejax_config(args)
    algo = getattr(rejax, name).create(**config)
    ts = algo.init_state(jax.random.PRNGKey(args.seed))
    k, repeats = 10, args.repeats

    def scan(body, carry):
        return jax.lax.scan(lambda c, _: (body(c), None), carry, None, length=k)[0]

    ts_after, traj = jax.jit(algo.collect_trajectories)(ts)

    def advantages(ts):
        last = jax.numpy.where(ts.last_done, 0, algo.critic.apply(ts.critic_ts.params, ts.last_obs))
        return algo.calculate_gae(traj, last)

    adv, targets = jax.jit(advantages)(ts_after)
    batch = AdvantageMinibatch(traj, adv, targets)
    keys = jax.random.split(jax.random.PRNGKey(1), algo.num_epochs)
    shuffles = jax.jit(lambda keys: jax.vmap(lambda key: algo.shuffle_and_split(batch, key))(keys))
    minibatches = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), shuffles(keys))  # [E * M, ...]
    steps = jax.jit(lambda ts: jax.lax.scan(lambda t, mb: (algo.update(t, mb), None), ts, minibatches)[0])
    update = jax.jit(lambda ts: scan(algo.train_iteration, ts))
    parts = {
        "update": thunks.median_seconds(update, ts, repeats=repeats) / k,
        "collect": thunks.median_seconds(jax.jit(lambda ts: scan(lambda t: algo.collect_trajectories(t)[0], ts)), ts,
                                   repeats=repeats) / k,
        "advantages": thunks.median_seconds(jax.jit(advantages), ts_after, repeats=repeats),
        "shuffles": thunks.median_seconds(shuffles, keys, repeats=repeats),
        "minibatch_steps": thunks.median_seconds(steps, ts, repeats=repeats),
    }
    parts["rest"] = parts["update"] - sum(v for key, v in parts.items() if key != "update")
    kinds = thunks.by_kind(update, (ts,))
    return {"peer": "rejax", "algo": args.algo, "peer_version": _version("rejax"), "jax_version": jax.__version__,
            "ms": {key: 1e3 * v for key, v in parts.items()},
            "kernels": {kind: [ms / k, n / k] for kind, (ms, n) in kinds.items()},
            "minibatch_steps": algo.num_epochs * algo.num_minibatches}


def _sb3_main(args) -> dict:
    """Train Stable-Baselines3 PPO (PyTorch, CPU) on gymnasium CartPole-v1 with the same hyperparameters."""
    import gymnasium
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(args.threads)
    times, model = [], None
    for repeat in range(args.repeats):
        vec_env = make_vec_env(args.env, n_envs=args.num_envs, seed=args.seed + repeat)
        model = PPO(
            "MlpPolicy", vec_env, n_steps=args.num_steps,
            batch_size=args.num_envs * args.num_steps // args.num_minibatches,
            n_epochs=args.update_epochs, learning_rate=args.lr, gamma=args.gamma, gae_lambda=args.gae_lambda,
            clip_range=args.clip_eps, ent_coef=args.ent_coef, vf_coef=args.vf_coef, max_grad_norm=args.max_grad_norm,
            policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=torch.nn.Tanh),
            seed=args.seed + repeat, device="cpu", verbose=0,
        )
        start = time.perf_counter()
        model.learn(total_timesteps=args.total_timesteps)
        times.append(time.perf_counter() - start)
    mean_return, _ = evaluate_policy(model, make_vec_env(args.env, n_envs=1, seed=123), n_eval_episodes=10)
    steps = _rounded_steps(args.total_timesteps, args.num_envs * args.num_steps, round_up=True)
    return {
        "peer": "sb3",
        "peer_version": _version("stable-baselines3"),
        "torch_version": torch.__version__,
        "gymnasium_version": gymnasium.__version__,
        "torch_threads": args.threads,
        "backend": "cpu",
        "device_kind": "cpu",
        "num_devices": 1,
        "compile_s": 0.0,
        "final_return": float(mean_return),
        **_sps_fields(steps, times),
    }


def _rounded_steps(total: int, batch: int, round_up: bool = False) -> int:
    whole = -(-total // batch) if round_up else total // batch
    return whole * batch


def _sps_fields(steps: int, times: list[float]) -> dict:
    sps = sorted(steps / t for t in times)
    return {
        "env_steps": steps,
        "train_s_median": statistics.median(times),
        "sps_median": statistics.median(sps),
        "sps_min": sps[0],
        "sps_max": sps[-1],
        "repeats": len(times),
    }


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


# ---------------------------------------------------------------------------------------------------------------
# The outside: install, or run a peer in its venv and relay its JSON line.


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """The shared settings (PPO's first; then those of rejax's PQN, DQN and SAC); defaults are rlpar's PPOConfig
    defaults (CartPole, 8 envs x 128 steps)."""
    parser.add_argument("--algo", default="ppo", help="rejax only: ppo, pqn, dqn or sac")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--total-timesteps", type=int, default=1_000_000)
    parser.add_argument("--update-epochs", type=int, default=4)
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2.5e-4)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--gae-lambda", type=float, default=0.95)
    parser.add_argument("--clip-eps", type=float, default=0.2)
    parser.add_argument("--ent-coef", type=float, default=0.01)
    parser.add_argument("--vf-coef", type=float, default=0.5)
    parser.add_argument("--max-grad-norm", type=float, default=0.5)
    parser.add_argument("--hidden-sizes", default="64,64", help="ppo, sac (rejax's pqn and dqn: always 64,64)")
    parser.add_argument("--activation", default="tanh", help="ppo, dqn, sac")
    parser.add_argument("--td-lambda", type=float, default=0.9, help="pqn")
    parser.add_argument("--eps-start", type=float, default=1.0, help="pqn, dqn")
    parser.add_argument("--eps-end", type=float, default=0.05, help="pqn, dqn")
    parser.add_argument("--exploration-fraction", type=float, default=0.1, help="pqn, dqn: of total_timesteps")
    parser.add_argument("--buffer-size", type=int, default=100_000, help="dqn, sac")
    parser.add_argument("--fill-buffer", type=int, default=1_000, help="dqn, sac: env steps before learning")
    parser.add_argument("--batch-size", type=int, default=64, help="dqn, sac: transitions per gradient step")
    parser.add_argument("--target-update-freq", type=int, default=1, help="dqn, sac: env steps between target updates")
    parser.add_argument("--polyak", type=float, default=0.0, help="dqn, sac: target <- polyak * target + (1-polyak) * online")
    parser.add_argument("--seeds", type=int, default=0, help="rejax ppo: learning mode, this many seeds vmapped")
    parser.add_argument("--eval-freq", type=int, default=0, help="learning mode: env steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=64, help="learning mode: greedy episodes per evaluation")
    parser.add_argument("--target", type=float, default=float("inf"), help="learning mode: return to time")
    parser.add_argument("--repeats", type=int, default=3, help="timed training runs; median and min/max reported")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (sb3 only)")
    parser.add_argument("--profile", action="store_true", help="rejax ppo: time one update's pieces (profile_update.py)")
    parser.add_argument("--deadline", type=float, default=None, help="Unix time after which this row is not started")


def peer_xla_flags(flags: str) -> str:
    """The XLA flags a peer runs with: the caller's (``--xla_cpu_max_isa=AVX2`` must reach both programs of a
    side-by-side run) less the fake-device count, since every peer trains on one device."""
    return " ".join(f for f in flags.split() if not f.startswith("--xla_force_host_platform_device_count"))


def run_peer(peer: str, argv: list[str], timeout_s: float = 900, python: str | None = None,
             site: str | None = None, platforms: str | None = None) -> dict | None:
    """Run ``peer`` in its venv, or with ``python`` (``$<PEER>_PYTHON``) and ``site`` as its ``PYTHONPATH``
    (``$<PEER>_SITE``), on JAX's ``platforms`` (``$<PEER>_JAX_PLATFORMS``, else ``cpu``); returns its JSON record,
    or None (with a message) if it is not installed or fails."""
    lines, error = run_peer_lines(peer, argv, timeout_s, python, site, platforms)
    records = [line for line in lines if "not_measured" not in line]
    if error or not records:
        print(f"[peers] {peer}: {error or 'no result'}", file=sys.stderr)
        return None
    return records[-1]


def run_peer_lines(peer: str, argv: list[str], timeout_s: float = 900, python: str | None = None,
                   site: str | None = None, platforms: str | None = None) -> tuple[list[dict], str | None]:
    """``run_peer`` for one row or several (``--then``): every JSON line the peer printed (records, and
    ``not_measured`` lines), those of a run stopped at ``timeout_s`` included, and what went wrong (None if
    nothing; the peer's error output is printed)."""
    if not installed(peer, python):
        return [], "skipped: not installed (python benchmarks/peers.py install)"
    name = peer.upper()
    site = site or os.environ.get(f"{name}_SITE")
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    if site:
        env["PYTHONPATH"] = site
    env["JAX_PLATFORMS"] = platforms or os.environ.get(f"{name}_JAX_PLATFORMS") or "cpu"
    flags = peer_xla_flags(os.environ.get("XLA_FLAGS", ""))
    if flags:
        env["XLA_FLAGS"] = flags
    cmd = [peer_python(peer, python), str(Path(__file__).resolve()), "--inside", peer, *argv]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
        stdout, stderr = proc.stdout, proc.stderr
        error = f"failed (exit {proc.returncode})" if proc.returncode else None
    except subprocess.TimeoutExpired as stopped:  # its output so far comes as bytes
        stdout, stderr = (_text(stopped.output), _text(stopped.stderr))
        error = f"timed out after {timeout_s:.0f}s"
    if error:
        print(f"[peers] {peer} {error}:\n{stderr[-3000:]}", file=sys.stderr)
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")], error


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def _inside(peer: str, argv: list[str]) -> int:
    """In the peer's interpreter: each row of ``argv`` (rows joined by ``--then``), one JSON line each."""
    import traceback

    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    rows = [[]]
    for arg in argv:
        rows.append([]) if arg == "--then" else rows[-1].append(arg)
    failed = False
    for row in rows:
        args = parser.parse_args(row)
        what = {"benchmark": "train", "program": peer, "env": args.env, "num_envs": args.num_envs}
        if args.deadline is not None and time.time() > args.deadline:
            print(f"[peers] {peer}: not started, past its deadline: {args.env}, {args.num_envs} envs", file=sys.stderr)
            print(json.dumps({"not_measured": "not started: out of time", **what}), flush=True)
            continue
        rejax_fn = _rejax_profile if args.profile else _rejax_learning if args.seeds else _rejax_main
        main_fn = {"rejax": rejax_fn, "sb3": _sb3_main}[peer]
        try:
            record = main_fn(args)
        except Exception as error:  # the next row may still run
            traceback.print_exc()
            message = str(error).strip().splitlines()
            reason = f"failed: {type(error).__name__}" + (f": {message[0][:300]}" if message else "")
            print(json.dumps({"not_measured": reason, **what}), flush=True)
            failed = True
            continue
        record.update(env=args.env, num_envs=args.num_envs, num_steps=args.num_steps,
                      total_timesteps=args.total_timesteps)
        print(json.dumps(record), flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--inside"]:
        return _inside(argv[1], argv[2:])

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["install", "rejax", "sb3"])
    parser.add_argument("--peers", default="rejax,sb3", help="install: which peers")
    parser.add_argument("--jax-version", default=None, help="install: jax version for rejax (default: this venv's)")
    parser.add_argument("--python", default=None,
                        help="the peer's interpreter (default: $<PEER>_PYTHON, else its venv)")
    parser.add_argument("--site", default=None, help="the peer's PYTHONPATH (default: $<PEER>_SITE, else none)")
    parser.add_argument("--platforms", default=None, help="the peer's JAX_PLATFORMS (default: $<PEER>_JAX_PLATFORMS, "
                                                          "else cpu)")
    args, rest = parser.parse_known_args(argv)
    if args.command == "install":
        jax_version = args.jax_version or _version("jax")
        for peer in args.peers.split(","):
            install(peer, jax_version)
        return 0
    record = run_peer(args.command, rest, python=args.python, site=args.site, platforms=args.platforms)
    if record is None:
        return 1
    import common  # standard library only; here, not at the top, so the peers' venvs never need it

    print(json.dumps({**record, **common.host_fields()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
