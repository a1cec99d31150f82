"""Bad env and agent targets on every user path (the command line with each agent, ``agents.*.train``,
``rlpar.evaluate``, ``rlpar.plot``, ``--resume``): one line naming the value, the underlying error's message and what
is accepted; exit 2 (a ``ValueError`` in Python); no traceback unless ``RLPAR_TRACEBACK=1``."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import agents
from examples import a2c
from rlpar.tools import evaluate, plot
from rlpar.tools import train as train_cli

REPO = Path(__file__).resolve().parents[1]

# A user's module of bad targets (and one that fails to import), put on sys.path by the fixture below.
BAD_TARGETS = '''
import jax.numpy as jnp
from gymnax.environments import environment, spaces
from rlpar.agent import AgentSpec
from examples.a2c import A2CConfig


def returns_int():
    return 3


def returns_none():
    return None


def raises():
    raise RuntimeError("level file levels/7.json not found")


class BadInit:
    def __init__(self):
        raise KeyError("width")


class _Env(environment.Environment):
    @property
    def default_params(self):
        return environment.EnvParams(max_steps_in_episode=5)

    def reset_env(self, key, params):
        return jnp.zeros(2), environment.EnvState(time=0)

    def step_env(self, key, state, action, params):
        return jnp.zeros(2), state, jnp.float32(0.0), jnp.bool_(False), {}

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)


class NoParams(_Env):
    @property
    def default_params(self):
        raise AttributeError("params not loaded yet")


class StepRaises(_Env):
    def step_env(self, key, state, action, params):
        raise IndexError("tile index 9 out of range")


class NoSpaces(_Env):
    def observation_space(self, params):
        raise NotImplementedError("observation_space is not written yet")


def _make_raises(config, env, env_params, num_envs, axis_name):
    raise RuntimeError("network width missing")


MAKE_RAISES = AgentSpec("make-raises", A2CConfig, _make_raises)
def _make_learn_raises(config, env, env_params, num_envs, axis_name):
    from examples.a2c import make_a2c

    def learn(state, experience):
        raise FloatingPointError("loss scale not set")

    return make_a2c(config, env, env_params, num_envs, axis_name)._replace(learn=learn)


LEARN_RAISES = AgentSpec("learn-raises", A2CConfig, _make_learn_raises)
MAKE_RETURNS_INT = AgentSpec("make-returns-int", A2CConfig, lambda *args: 7)
CONFIG_NOT_DATACLASS = AgentSpec("config-not-dataclass", dict, lambda *args: None)
MAKE_NOT_CALLABLE = AgentSpec("make-not-callable", A2CConfig, "make")
NOTHING = None
'''

ENV_ACCEPTED = "accepted: a gymnax id"
AGENT_ACCEPTED = "known agents are dqn, ippo, mappo, ppo, ppo_rnn, pqn, sac, or package.module:ATTR"
TINY = ["--num-envs", "4", "--num-steps", "4", "--total-timesteps", "32", "--eval-every", "0"]

# (agent, --env value, what the line must say besides the value): every agent meets bad env targets.
ENV_CASES = [
    ("ppo", "os.path:join", ["calling join() raised TypeError: join() missing 1 required positional argument",
                             ENV_ACCEPTED]),
    ("ppo_rnn", "os.path:sep", ["str is neither callable nor an environment", ENV_ACCEPTED]),
    ("pqn", "bad_targets:returns_int", ["the factory returned int, expected an environment instance", ENV_ACCEPTED]),
    ("dqn", "bad_targets:returns_none", ["the factory returned NoneType", ENV_ACCEPTED]),
    ("sac", "bad_targets:raises", ["raised RuntimeError: level file levels/7.json not found", ENV_ACCEPTED]),
    ("ppo", "bad_targets:BadInit", ["calling BadInit() raised KeyError: 'width'", ENV_ACCEPTED]),
    ("ppo_rnn", "no_such_module:make", ["cannot import module 'no_such_module'", ENV_ACCEPTED]),
    ("pqn", "bad_targets:missing", ["module 'bad_targets' has no attribute 'missing'", ENV_ACCEPTED]),
    ("dqn", "broken_module:make", ["importing module 'broken_module' raised ZeroDivisionError: division by zero",
                                   ENV_ACCEPTED]),
    ("ppo", "bad_targets:NoParams", ["checking its API (parameters, spaces, a step) raised AttributeError: params",
                                     "gymnax's API"]),
    ("pqn", "bad_targets:NoSpaces", ["raised NotImplementedError: observation_space is not written yet",
                                     "gymnax's API"]),
    ("sac", "os.path:", ["expected 'package.module:attribute'", ENV_ACCEPTED]),
    ("dqn", "CartPol-v1", ["unknown env 'CartPol-v1'. Did you mean 'CartPole-v1'"]),
    ("ppo", "bad_targets:StepRaises", ["checking its API (parameters, spaces, a step) raised IndexError: tile index 9",
                                       "gymnax's API"]),
]
# (agent target, what the line must say)
AGENT_CASES = [
    ("os.path:join", ["os.path.join is function, not an rlpar.agent.AgentSpec", AGENT_ACCEPTED]),
    ("no_such_module:SPEC", ["cannot import module 'no_such_module'", AGENT_ACCEPTED]),
    ("bad_targets:NOTHING", ["bad_targets.NOTHING is nothing, not an rlpar.agent.AgentSpec", AGENT_ACCEPTED]),
    ("broken_module:SPEC", ["importing module 'broken_module' raised ZeroDivisionError", AGENT_ACCEPTED]),
    ("bad_targets:MAKE_RAISES", ["agent 'bad_targets:MAKE_RAISES': make(config, env, ...) raised RuntimeError: network width"]),
    ("bad_targets:MAKE_RETURNS_INT", ["make returned int, not an rlpar.agent.Agent"]),
    ("bad_targets:LEARN_RAISES", ["building the programs of agent 'bad_targets:LEARN_RAISES' on env 'CartPole-v1' raised "
                                  "FloatingPointError: loss scale not set"]),
    ("bad_targets:CONFIG_NOT_DATACLASS", ["its config_cls is <class 'dict'>, not a dataclass"]),
    ("bad_targets:MAKE_NOT_CALLABLE", ["its make is str, not callable"]),
    ("dqnn", ["unknown agent 'dqnn'", AGENT_ACCEPTED]),
]
# (agent package, env target, what the ValueError must say): the library path of every agent.
LIBRARY_CASES = [
    (agents.ppo, "os.path:join", "join() missing 1 required positional argument"),
    (agents.ppo_rnn, "bad_targets:raises", "raised RuntimeError: level file levels/7.json not found"),
    (agents.pqn, "bad_targets:returns_int", "the factory returned int"),
    (agents.dqn, "bad_targets:BadInit", "raised KeyError: 'width'"),
    (agents.sac, "broken_module:make", "raised ZeroDivisionError"),
    (a2c, "bad_targets:NoParams", "raised AttributeError: params not loaded yet"),
    (a2c, "bad_targets:StepRaises", "raised IndexError: tile index 9 out of range"),
]


@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    (tmp_path / "bad_targets.py").write_text(BAD_TARGETS)
    (tmp_path / "broken_module.py").write_text("RATIO = 1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("bad_targets", "broken_module"):
        sys.modules.pop(name, None)


def _one_line(captured, *parts: str) -> str:
    assert "Traceback" not in captured.err + captured.out
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("agent, env, says", ENV_CASES, ids=[f"{a}-{e}" for a, e, _ in ENV_CASES])
def test_cli_bad_env_target(agent, env, says, user_modules, capsys):
    assert train_cli.main([agent, "--env", env, *TINY]) == 2
    _one_line(capsys.readouterr(), repr(env), *says)


@pytest.mark.parametrize("target, says", AGENT_CASES, ids=[t for t, _ in AGENT_CASES])
def test_cli_bad_agent_target(target, says, user_modules, capsys):
    assert train_cli.main([target, "--env", "CartPole-v1", *TINY]) == 2
    _one_line(capsys.readouterr(), *says)


@pytest.mark.parametrize("package, env, says", LIBRARY_CASES, ids=[f"{p.SPEC.name}-{e}" for p, e, _ in LIBRARY_CASES])
def test_library_bad_env_target_is_a_one_line_value_error(package, env, says, user_modules):
    with pytest.raises(ValueError) as raised:
        package.train(None, env, devices=1, eval_every=0)
    message = str(raised.value)
    assert "\n" not in message and repr(env) in message and says in message


def _edited_run_dir(tiny_run_dir, tmp_path, **changes) -> Path:
    run_dir = tmp_path / "edited"
    shutil.copytree(tiny_run_dir, run_dir)
    meta = json.loads((run_dir / "config.json").read_text())
    for key, value in changes.items():
        if key == "env":
            meta["run"]["env"] = value
        else:
            meta[key] = value
    (run_dir / "config.json").write_text(json.dumps(meta))
    return run_dir


@pytest.mark.parametrize("tool", ["evaluate", "resume"])
@pytest.mark.parametrize("change, says", [
    ({"env": "bad_targets:raises"}, ["env 'bad_targets:raises'", "raised RuntimeError: level file"]),
    ({"agent": "broken_module:SPEC"}, ["agent 'broken_module:SPEC': importing module 'broken_module' raised "
                                       "ZeroDivisionError"]),
], ids=["env-factory-raises", "agent-module-broken"])
def test_a_run_dir_naming_a_bad_target_is_one_line(tool, change, says, tiny_run_dir, tmp_path, user_modules, capsys):
    run_dir = _edited_run_dir(tiny_run_dir, tmp_path, **change)
    if tool == "evaluate":
        assert evaluate.main([str(run_dir), "--episodes", "2"]) == 2
    else:
        assert train_cli.main(["--resume", str(run_dir)]) == 2
    _one_line(capsys.readouterr(), *says)


@pytest.mark.parametrize("argv, says", [
    (["NO_SUCH_DIR"], ["run dir", "does not exist"]),
    (["NOT_A_RUN"], ["is not an rlpar run dir (it has no config.json)"]),
    (["BAD_JSON"], ["is not readable JSON"]),
], ids=["missing", "not-a-run-dir", "broken-config"])
def test_plot_and_evaluate_bad_run_dirs_are_one_line(argv, says, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "NOT_A_RUN").mkdir()
    (tmp_path / "BAD_JSON").mkdir()
    (tmp_path / "BAD_JSON" / "config.json").write_text("{not json")
    (tmp_path / "BAD_JSON" / "metrics.jsonl").write_text("")
    for tool in (plot, evaluate):
        assert tool.main(argv) == 2
        _one_line(capsys.readouterr(), *says)


def test_rlpar_traceback_shows_the_users_own_error_in_a_fresh_process(tmp_path):
    (tmp_path / "bad_targets.py").write_text(BAD_TARGETS)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "rlpar.train", "ppo", "--env", "bad_targets:raises", *TINY]
    plain = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.strip().splitlines() == [plain.stderr.strip()]  # one line
    assert "RLPAR_TRACEBACK=1 shows the traceback" in plain.stderr
    verbose = subprocess.run(command, cwd=tmp_path, env={**env, "RLPAR_TRACEBACK": "1"}, capture_output=True,
                             text=True, timeout=300)
    assert verbose.returncode == 2 and "Traceback" in verbose.stderr
    assert 'raise RuntimeError("level file levels/7.json not found")' in verbose.stderr  # the user's own line
    assert verbose.stderr.strip().splitlines()[-1] == plain.stderr.strip()  # then the same one line
