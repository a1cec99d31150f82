"""The engine's public contract, tested as its documentation describes it: a user's agent (examples/a2c.py) from
Python and from the CLI, any act_fn under both backends, env instances, layering, and no JAX backend at import."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
from rlpar.agent import Agent, AgentConfig, AgentFunctions, AgentSpec
from rlpar.core import parallel
from rlpar.run import records, runner
from rlpar.run.runner import RunConfig, run
from rlpar.tools import evaluate
from rlpar.tools import train as train_cli

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # examples/ is not installed: users run it from a checkout, as here

from examples.a2c import SPEC as A2C, A2CConfig  # noqa: E402

SMALL_A2C = A2CConfig(num_envs=8, num_steps=8, total_timesteps=8 * 8 * 6)


def _fresh_python(code: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_users_agent_from_python_on_four_devices_keeps_parameters_bit_identical():
    assert isinstance(A2C.make(SMALL_A2C, *__import__("envs").make("CartPole-v1"), 2, None), Agent)
    result = runner.train(A2C, SMALL_A2C, "CartPole-v1", devices=4, log_every=3)
    copies = parallel.replicas(result.state.agent.params)
    assert len(copies) == 4
    for other in copies[1:]:
        jax.tree.map(np.testing.assert_array_equal, copies[0], other)
    record = result.metrics[-1]
    assert record["update"] == 6 and {"loss/policy", "loss/value", "episodes"} <= set(record)  # engine's episodes


def test_users_agent_from_the_cli_trains_and_evaluates(tmp_path, capsys):
    run_dir = tmp_path / "a2c"
    argv = ["examples.a2c:SPEC", "--env", "CartPole-v1", "--devices", "2", "--num-envs", "8", "--num-steps", "8",
            "--total-timesteps", str(8 * 8 * 4), "--log-every", "2", "--run-dir", str(run_dir)]
    assert train_cli.main(argv) == 0
    assert json.loads((run_dir / "config.json").read_text())["agent"] == "examples.a2c:SPEC"
    assert evaluate.main([str(run_dir), "--episodes", "3"]) == 0
    assert "greedy policy, 3 episodes" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.full_optimization  # a learning run: compiled as a user's, its run long enough to pay
def test_users_agent_learns_cartpole():
    result = runner.train(A2C, A2CConfig(total_timesteps=300_000), "CartPole-v1", devices=2, log_every=50)
    assert records.mean_recent_return(result.metrics) > 150  # a random policy scores about 22


def _make_still(config, env, env_params, num_envs, axis_name):
    """An agent whose act ignores its inputs (a constant action and carry) and whose bootstrap is a constant."""
    def act(state, carry, obs, key):
        return jnp.zeros((num_envs,), jnp.int32), jnp.zeros((num_envs, 2)), {"constant": jnp.ones(num_envs)}

    def learn(state, experience):
        finals = jnp.sum(experience.traj.final)  # 5.0 at every truncated step
        return state + 1, {"truncations": jax.lax.psum(jnp.sum(experience.traj.truncated), axis_name),
                           "finals": jax.lax.psum(finals, axis_name)}

    return AgentFunctions(lambda kp, kd: jnp.int32(0), lambda n: jnp.zeros((n, 2)), act,
                  lambda state, carry, obs: jnp.full((num_envs,), 5.0), learn,
                  lambda state, det: (lambda carry, obs, key: (jnp.zeros(obs.shape[0], jnp.int32), carry)))


@pytest.mark.parametrize("backend", ["pmap", "shard_map"])
def test_any_act_fn_runs_under_both_backends(backend):
    # A constant act, carry and bootstrap are unvarying over the device axis under shard_map; the collector must
    # still build equal types in its branches (once a "cond branches must have equal output types" error).
    spec = AgentSpec("still", AgentConfig, _make_still)
    config = AgentConfig(num_envs=4, num_steps=12, total_timesteps=4 * 12 * 2)
    result = run(spec, config, RunConfig(env="Probe-Truncated-v0", devices=2, log_every=2, backend=backend))
    record = result.metrics[-1]
    assert record["truncations"] == 2 * 4  # per update: every 5th step of 12 (twice), 4 envs over both devices
    assert record["finals"] == 5.0 * record["truncations"] and record["episode_return"] == 5.0


def test_ppo_trains_on_a_users_gymnax_environment_instance():
    from gymnax.environments.classic_control.cartpole import CartPole

    config = agents.PPOConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 2, num_minibatches=2)
    result = agents.ppo.train(config, CartPole(), devices=2, log_every=2)
    assert result.metrics[-1]["update"] == 2


# the host loop's modules, in the order they may import each other: each imports only those before it
HOST_LOOP = ["rlpar.run.config", "rlpar.run.records", "rlpar.run.state", "rlpar.run.prepare", "rlpar.run.chunks",
             "rlpar.run.build", "rlpar.run.runner"]
# every module of the engine core and the run shell, and the contract's public path
ENGINE = sorted({f"rlpar.{package}.{path.stem}" for package in ("core", "run")
                 for path in (REPO / "rlpar" / package).glob("*.py") if path.stem != "__init__"} | {"rlpar.agent"})


def test_engine_modules_import_no_agent_and_start_no_backend():
    proc = _fresh_python(
        f"import sys\nfor m in {ENGINE!r}: __import__(m)\n"
        "from jax._src import xla_bridge as xb\n"
        "print(sorted(m for m in sys.modules if m == 'agents' or m.startswith('agents.')), bool(xb._backends))"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["[]", "False"]


def test_each_host_loop_module_imports_only_the_ones_before_it():
    proc = _fresh_python(
        f"import sys\nmodules = {HOST_LOOP!r}\n"
        "for i, m in enumerate(modules):\n"
        "    __import__(m)\n"
        "    print(m, sorted(set(modules[i + 1:]) & set(sys.modules)))"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [f"{m} []" for m in HOST_LOOP]


def test_importing_the_libraries_starts_no_backend_and_train_creates_the_devices_asked_for(tmp_path):
    # What README's library example does in a fresh process: import, then train on 2 devices of a CPU host.
    proc = _fresh_python(
        "import agents, envs, rlpar.train, rlpar.evaluate, rlpar.plot\n"
        "from jax._src import xla_bridge as xb\n"
        "assert not xb._backends, 'an import started a JAX backend'\n"
        "cfg = agents.PPOConfig(num_envs=4, num_steps=8, total_timesteps=64, num_minibatches=2)\n"
        "r = agents.ppo.train(cfg, 'CartPole-v1', devices=2, log_every=2)\n"
        "import jax; print(len(jax.devices()), r.metrics[-1]['update'])", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["2", "2"]


def test_devices_after_the_backend_started_is_one_clear_error(tmp_path):
    proc = _fresh_python(
        "import jax, agents\njax.numpy.zeros(1)\n"
        "try:\n    agents.ppo.train(None, 'CartPole-v1', devices=2)\nexcept ValueError as err:\n    print(err)",
        cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "devices=2: JAX's CPU backend already started in this process with 1 device(s)" in proc.stdout
    assert "request_cpu_devices(2)" in proc.stdout
