import os, sys
import jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, ".")
import agents.ppo
from agents.ppo import PPOConfig
import envs
from rlpar.core import seeds
from rlpar.run.prepare import make_program_factory
from rlpar.run import build
n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
config = PPOConfig.for_env("Breakout-MinAtar", platform="tpu").replace(num_envs=n, num_steps=16)
env, env_params = envs.make("Breakout-MinAtar")
def program(num_seeds):
    return make_program_factory(agents.ppo.SPEC, config, seeds.make_slots(num_seeds, ""), env, env_params, config.num_envs)(None)
single, two = program(1), program(2)
kp, kd = jax.random.split(jax.random.key(0))
k1, k2 = jax.random.fold_in(kp, 0), jax.random.fold_in(kd, 0)
s = jax.jit(single.init)(k1, k2)
t = jax.jit(two.init)(kp, kd)
def diffs(a, b, slot):
    out = []
    for (path, x), y in zip(jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b)):
        x, y = np.asarray(jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x), np.asarray(jax.random.key_data(y) if jnp.issubdtype(y.dtype, jax.dtypes.prng_key) else y)
        if slot: y = y[0] if y.shape[0] == 2 and x.shape == y.shape[1:] else y
        if x.shape != y.shape: out.append((jax.tree_util.keystr(path), "shape", x.shape, y.shape)); continue
        d = float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max()) if x.size else 0.0
        out.append((jax.tree_util.keystr(path), d))
    return out
print("init differences single vs slot0 (nonzero):")
for row in diffs(s, t, True):
    if row[1] != 0.0: print("  ", row)
def svr(params, slot=None):
    res = []
    for path, w in jax.tree_util.tree_leaves_with_path(params):
        w = np.asarray(w, np.float64)
        if slot is not None: w = w[slot]
        if w.ndim == 2:
            sv = np.linalg.svd(w, compute_uv=False); res.append((jax.tree_util.keystr(path)[-40:], round(sv.max(), 4), round(sv.min(), 4)))
    return res
print("singular values single:", svr(s.agent.params))
print("singular values slot0:", svr(t.agent.params, 0))
o0 = build.compile_init(jax.jit(single.init).lower(k1, k2), jax.default_backend())(k1, k2)
print("O0 init vs plain init, params:", max(r[1] for r in diffs(s.agent.params, o0.agent.params, False)))
print("singular values O0:", svr(o0.agent.params))
s1, m1 = jax.jit(single.update)(s)
t1, m2 = jax.jit(two.update)(t)
print("metrics single:", {k: round(float(np.asarray(v).ravel()[0]), 5) for k, v in m1.items() if np.asarray(v).size} if isinstance(m1, dict) else m1)
print("metrics two:", {k: np.round(np.asarray(v).ravel()[:2], 5).tolist() for k, v in m2.items()} if isinstance(m2, dict) else m2)
print("after one update, params apart:", max(r[1] for r in diffs(s1.agent.params, t1.agent.params, True)))
rs = [r for r in diffs(s1, t1, True) if r[1] != 0.0]
print("after one update, state leaves that differ:", len(rs)); [print("  ", r) for r in rs[:12]]
