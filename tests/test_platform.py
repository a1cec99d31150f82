"""rlpar.core.platform: every per-backend choice answers on XLA:CPU as documented, RLPAR_PLAIN_LAYERS=1 gives each the
accelerator's answer, forcing a choice is undone after its block, and the old names are the same functions."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlpar.core import platform

DOCS = Path(__file__).resolve().parents[1] / "docs" / "accelerators.md"
STEP_ROWS, STEPS, MINIBATCHES = 4096, 128, 8  # PPO's 4,096 envs x 128 steps, 8 minibatches

# the choice functions, each with its answer on XLA:CPU and on an accelerator (what RLPAR_PLAIN_LAYERS=1 gives a CPU)
CHOICES = {
    "threefry_unrolled": (lambda: platform.threefry_unrolled(), True, False),
    "dense_fast_path": (lambda: platform.dense_fast_path(rows=256), True, False),  # 256 rows: fast on AVX2 as well
    "conv_as_patches": (lambda: platform.conv_as_patches(), True, False),
    "raveled_update": (lambda: platform.raveled_update(), True, False),
    "shuffle_method": (lambda: platform.shuffle_method(), "feistel", "sort"),
    "shuffle_block": (lambda: platform.shuffle_block(STEPS * STEP_ROWS, STEP_ROWS, MINIBATCHES), 1, platform.BLOCK_MAX),
    "packed_gather": (lambda: platform.packed_gather(1), False, False),  # on a TPU only (its own test)
    "gather_layout": (lambda: platform.gather_layout(platform.shuffle_block(STEPS * STEP_ROWS, STEP_ROWS, MINIBATCHES),
                                                     400), "flat", "blocks"),  # Breakout-MinAtar's rows of 400
    "collector_keys_up_front": (lambda: platform.collector_keys_up_front(STEPS * (1 + 8192)), True, False),
    "collector_unroll": (lambda: platform.collector_unroll(), 1, platform.UNROLL_ACCELERATOR),
    "gae_method": (lambda: platform.gae_method(), "scan", "scan"),  # the associative form only when forced
    "evaluation_in_chunk": (lambda: platform.evaluation_in_chunk(), True, False),
    "donate_state": (lambda: platform.donate_state(4 << 20), True, False),  # PPO's state at one env: about 4 MiB
    "one_env_step": (lambda: platform.one_env_step(), False, True),
}


@pytest.fixture(autouse=True)
def nothing_forced(monkeypatch):
    monkeypatch.delenv(platform.PLAIN_LAYERS_ENV, raising=False)
    with platform.fast_paths(None), platform.forcing(**{choice: None for choice in platform.CHOICES}):
        yield


def answers():
    return {name: ask() for name, (ask, _, _) in CHOICES.items()}


def test_this_cpu_takes_the_fast_paths():
    assert answers() == {name: cpu for name, (_, cpu, _) in CHOICES.items()}
    assert platform.gather_layout(1, 400) == "flat" and platform.gather_layout(64, 4) == "flat"
    assert platform.collector_keys_up_front(10 ** 9)


@pytest.mark.parametrize("how", ["environment", "switch"])
def test_plain_layers_give_every_choice_the_accelerators_answer(monkeypatch, how):
    if how == "environment":
        monkeypatch.setenv(platform.PLAIN_LAYERS_ENV, "1")
    with platform.fast_paths(False if how == "switch" else None):
        assert answers() == {name: accelerator for name, (_, _, accelerator) in CHOICES.items()}
        # the accelerator splits keys up front up to KEYS_UP_FRONT_MAX, and gathers narrow rows' blocks as flat rows
        assert platform.collector_keys_up_front(platform.KEYS_UP_FRONT_MAX)
        assert not platform.collector_keys_up_front(platform.KEYS_UP_FRONT_MAX + 1)
        assert platform.gather_layout(64, 4) == "flat"
        # a state of DONATE_FROM_BYTES per device or more (a large replay buffer) is donated there too
        assert platform.donate_state(platform.DONATE_FROM_BYTES)
        assert not platform.donate_state(platform.DONATE_FROM_BYTES - 1)


@pytest.mark.parametrize("backend, stepped_alone", [("tpu", True), ("gpu", False), ("cpu", False)])
def test_one_env_is_stepped_alone_on_a_tpu_only(monkeypatch, backend, stepped_alone):
    # measured on a TPU v5e (1.63x rejax on Breakout-MinAtar at one env) and on XLA:CPU (no gain); not on a GPU
    monkeypatch.setattr(platform.jax, "default_backend", lambda: backend)
    assert platform.one_env_step() is stepped_alone
    with platform.forcing(one_env_step=not stepped_alone):
        assert platform.one_env_step() is (not stepped_alone)


def test_asking_for_an_accelerator_platform_gives_its_answers():
    for ask in (platform.threefry_unrolled, platform.conv_as_patches, platform.raveled_update):
        assert ask("cpu") and not ask("tpu") and not ask("gpu")
    assert not platform.dense_fast_path("tpu", rows=256)
    assert platform.shuffle_method("cpu") == "feistel" and platform.shuffle_method("gpu") == "sort"
    assert platform.shuffle_method("tpu") == "feistel"  # measured with packed single rows on a TPU v5e


@pytest.mark.parametrize("backend, packed", [("tpu", True), ("gpu", False), ("cpu", False)])
def test_single_rows_are_gathered_packed_on_a_tpu_only(monkeypatch, backend, packed):
    # measured on a TPU v5e (CartPole at 4,096 envs: 143.5 -> 28.1 ms per update) and on XLA:CPU (no gain); not on a
    # GPU. Blocks of rows gather leaf by leaf everywhere (packing them did not pay on the TPU).
    monkeypatch.setattr(platform.jax, "default_backend", lambda: backend)
    with platform.fast_paths(False if backend != "cpu" else None):
        assert platform.packed_gather(1) is packed
        assert not platform.packed_gather(64)
        assert platform.shuffle_method() == ("sort" if backend == "gpu" else "feistel")
    with platform.forcing(packed_gather=not packed):
        assert platform.packed_gather(1) is (not packed)


def test_the_init_options_follow_the_device_not_the_switch(monkeypatch):
    cpu = (platform.INIT_CPU_COMPILER_OPTIONS, platform.INIT_COMPILER_OPTIONS)
    assert platform.init_compiler_options("cpu") == cpu
    assert platform.init_compiler_options("tpu") == platform.init_compiler_options("gpu") == (
        {"xla_backend_optimization_level": 0},)
    monkeypatch.setenv(platform.PLAIN_LAYERS_ENV, "1")  # the init's state is the same bit for bit either way
    assert platform.init_compiler_options("cpu") == cpu


def test_rolled_threefry_holds_inside_its_block_only():
    with platform.rolled_threefry():
        assert not platform.threefry_unrolled()
    assert platform.threefry_unrolled()


def test_forcing_wins_and_is_restored_even_after_an_error():
    before = answers()
    with pytest.raises(RuntimeError):
        with platform.forcing(shuffle_method="sort", shuffle_block=8, gather_layout="shaped", keys_up_front=False,
                              collector_unroll=4):
            assert platform.shuffle_method() == "sort"
            assert platform.shuffle_block(STEPS * STEP_ROWS, STEP_ROWS, MINIBATCHES) == 8
            assert platform.shuffle_block(STEPS * 12, 12, 4) == 1  # 8 does not divide a step's 12 rows
            assert platform.gather_layout(1, 4) == "shaped"
            assert not platform.collector_keys_up_front(10)
            assert platform.collector_unroll() == 4
            with platform.forcing(raveled_update=False):  # the XLA:CPU path turned off here, by name
                assert not platform.raveled_update() and not platform.raveled_update("cpu")
            with platform.forcing(collector_unroll=None):  # None: the backend decides inside
                assert platform.collector_unroll() == 1
            assert platform.collector_unroll() == 4
            raise RuntimeError
    assert answers() == before
    assert all(platform.forced_answer(choice) is None for choice in platform.CHOICES)
    platform.set_collector_unroll(3)
    assert platform.collector_unroll() == 3
    platform.set_collector_unroll(None)
    assert platform.collector_unroll() == 1


def test_a_config_s_collector_unroll_beats_the_backend_s_and_a_forced_answer_beats_both():
    assert platform.collector_unroll(0) == 1  # this CPU's answer
    assert platform.collector_unroll(3) == 3
    with platform.fast_paths(False):
        assert platform.collector_unroll(0) == platform.UNROLL_ACCELERATOR and platform.collector_unroll(1) == 1
    with platform.forcing(collector_unroll=4):
        assert platform.collector_unroll(3) == 4


def _scan_unrolls(jaxpr) -> list:
    from tests.helpers import jaxpr_eqns

    return [eqn.params["unroll"] for eqn in jaxpr_eqns(jaxpr) if eqn.primitive.name == "scan"]


@pytest.mark.parametrize("requested, expected", [(0, 1), (4, 4)])
def test_the_collector_unrolls_its_scan_as_the_config_asks(requested, expected):
    import jax

    import envs
    from agents.ppo import SPEC, PPOConfig
    from rlpar.core import program

    config = PPOConfig(num_envs=2, num_steps=8, collector_unroll=requested)
    env, env_params = envs.make("CartPole-v1")
    prog = program.make_program(SPEC.make(config, env, env_params, 2, None), env, env_params, 2, 8, None,
                                collector_unroll=config.collector_unroll)
    state = jax.eval_shape(prog.init, jax.random.PRNGKey(0), jax.random.PRNGKey(1))
    # the collect's scan is the first one traced (the learner's epochs and minibatch steps come after it)
    assert _scan_unrolls(jax.make_jaxpr(prog.update)(state).jaxpr)[0] == expected


@pytest.mark.parametrize("value", [-1, True, 9, 1.5])
def test_a_bad_collector_unroll_is_refused_naming_it(value):
    from agents.ppo import PPOConfig

    with pytest.raises(ValueError, match=f"collector_unroll={value!r}: must be an integer from 0 .* num_steps=8"):
        PPOConfig(num_steps=8, collector_unroll=value).validate()


@pytest.mark.parametrize("answers, message", [
    ({"shuffle_method": "bogus"}, "shuffle method 'bogus'"),
    ({"shuffle_block": 0}, "shuffle block 0"),
    ({"gather_layout": "tiles"}, "shuffle layout 'tiles'"),
    ({"collector_unroll": 1.5}, "unroll 1.5"),
    ({"raveled_update": "yes"}, "'yes': expected True, False or None"),
    ({"gae_method": "parallel"}, "gae method 'parallel': expected one of scan, associative"),
    ({"dense": True}, "choices \\['dense'\\]"),
])
def test_a_bad_answer_is_refused_and_nothing_stays_forced(answers, message):
    with pytest.raises(ValueError, match=message):
        with platform.forcing(**{"keys_up_front": False, **answers}):
            pass
    assert platform.forced_answer("keys_up_front") is None


def test_the_old_names_are_the_platforms():
    from agents import platform as agents_platform
    from agents import shuffle
    from rlpar.core import cpu_paths, rollout

    assert shuffle.method is platform.shuffle_method and shuffle.block_size is platform.shuffle_block
    assert shuffle.set_method is platform.set_shuffle_method and shuffle.set_block is platform.set_shuffle_block
    assert rollout.keys_up_front is platform.collector_keys_up_front
    assert rollout.scan_unroll is platform.collector_unroll and rollout.set_unroll is platform.set_collector_unroll
    assert rollout.set_keys_up_front is platform.set_keys_up_front
    for name in ("cpu_fast_paths", "fast_paths", "set_fast_paths", "forced", "resolve", "PLAIN_LAYERS_ENV"):
        assert getattr(cpu_paths, name) is getattr(agents_platform, name) is getattr(platform, name)
    assert cpu_paths.rolled_threefry is platform.rolled_threefry
    assert agents_platform.dense_fast_path is platform.dense_fast_path
    with shuffle.using("sort", 4, layout="shaped"):
        assert (platform.forced_answer("shuffle_method"), platform.forced_answer("shuffle_block"),
                platform.forced_answer("gather_layout")) == ("sort", 4, "shaped")
    assert platform.forced_answer("shuffle_method") is None


def test_the_docs_table_names_every_choice():
    text = DOCS.read_text()
    section = text[text.index("## What each backend runs, and why"):]
    section = section[:section.index("\n## ", 1)]
    named = set(re.findall(r"`rlpar\.core\.platform\.(\w+)`", section))
    assert set(CHOICES) | {"init_compiler_options"} <= named
    assert all(callable(getattr(platform, name)) for name in named)


def test_importing_it_loads_no_agent_and_starts_no_backend():
    code = ("import sys, rlpar.core.platform, jax._src.xla_bridge as xb; "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'agents']; assert not xb._backends")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_force_sets_one_choice_until_undone_and_refuses_an_unknown_one():
    platform.force("raveled_update", False)
    assert not platform.raveled_update("cpu")
    platform.force("raveled_update", None)
    assert platform.raveled_update("cpu")
    with pytest.raises(ValueError, match="choice 'dense': expected one of"):
        platform.force("dense", True)


def test_runtime_defaults_are_set_unless_the_user_set_one():
    environ = {"PATH": "/bin"}
    assert platform.set_runtime_defaults(environ) == platform.TPU_RUNTIME_DEFAULTS
    assert environ["TPU_PREMAPPED_BUFFER_SIZE"] == str(256 * 2 ** 20) == environ[
        "TPU_PREMAPPED_BUFFER_TRANSFER_THRESHOLD_BYTES"]
    mine = {"TPU_PREMAPPED_BUFFER_SIZE": "67108864"}
    assert platform.set_runtime_defaults(mine) == {} and mine == {"TPU_PREMAPPED_BUFFER_SIZE": "67108864"}


def test_the_commands_set_them_before_the_devices_open(tmp_path):
    # a fresh process, as a user starts it: the settings are in place by the time JAX opens the backend
    code = ("import os, jax._src.xla_bridge as xb; from rlpar.tools import train; seen = {}; "
            "original = xb.backends\n"
            "def spy(*a, **k):\n"
            "    seen.setdefault('size', os.environ.get('TPU_PREMAPPED_BUFFER_SIZE')); return original(*a, **k)\n"
            "xb.backends = spy; train.main(['ppo', '--env', 'CartPole-v1', '--dry-run'])\n"
            "print('SIZE', seen.get('size'))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPU_PREMAPPED")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=120)
    assert f"SIZE {256 * 2 ** 20}" in proc.stdout, proc.stdout + proc.stderr[-2000:]
