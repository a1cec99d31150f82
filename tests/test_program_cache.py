"""rlpar.run.program_cache: whole compiled programs, loaded by a warm run without tracing; never a stale one."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
from agents.ppo import PPOConfig
from rlpar.run import compile_cache, program_cache, runner
from rlpar.run.runner import RunConfig

REPO = Path(__file__).resolve().parents[1]
TINY = ["--env", "CartPole-v1", "--num-envs", "4", "--num-steps", "8", "--total-timesteps", "96",
        "--num-minibatches", "2", "--hidden-sizes", "8", "--log-every", "3"]
TINY_NO_EVAL = [*TINY, "--eval-every", "0"]  # where the test is about the chunk program alone


@pytest.fixture
def cache_dir(tmp_path):
    program_cache.configure(tmp_path)
    yield tmp_path / program_cache.SUBDIR
    program_cache.configure(None)


def _snapshot(description="one"):
    return program_cache.snapshot(description, jax.devices()[:1], require_closed=False)  # pytest is not a closed run


def _compiler(fn, *args):
    calls = []

    def compile():
        calls.append(1)
        return jax.jit(fn).lower(*args).compile()

    return compile, calls


def test_a_stored_program_is_loaded_and_computes_the_same(cache_dir):
    x = jnp.arange(6.0)
    compile, calls = _compiler(lambda v: jnp.cumsum(v) * 2.0, x)
    snap = _snapshot()  # taken once, before compiling, as the runner does
    assert not program_cache.stored("p", snap)
    first, loaded = program_cache.load_or_compile("p", compile, snap)
    assert not loaded and len(calls) == 1 and len(list(cache_dir.glob("*.program"))) == 1
    assert program_cache.stored("p", snap) and not program_cache.stored("q", snap)
    assert not program_cache.stored("p", None)  # not cacheable
    second, loaded = program_cache.load_or_compile("p", compile, snap)
    assert loaded and len(calls) == 1  # not compiled again
    np.testing.assert_array_equal(np.asarray(second(x)), [0, 2, 6, 12, 20, 30])
    np.testing.assert_array_equal(np.asarray(second(x)), np.asarray(first(x)))


def test_another_description_or_program_name_is_another_entry(cache_dir):
    x = jnp.ones(3)
    compile, calls = _compiler(lambda v: v + 1, x)
    program_cache.load_or_compile("p", compile, _snapshot("one"))
    program_cache.load_or_compile("p", compile, _snapshot("two"))
    program_cache.load_or_compile("q", compile, _snapshot("one"))
    assert len(calls) == 3 and len(list(cache_dir.glob("*.program"))) == 3


def test_off_or_not_cacheable_stores_nothing(tmp_path):
    program_cache.configure(None)
    assert program_cache.snapshot("one", jax.devices()[:1]) is None
    program_cache.configure(tmp_path)
    try:
        assert program_cache.snapshot(None, jax.devices()[:1]) is None  # the caller said: not cacheable
        compile, calls = _compiler(lambda v: v * 3, jnp.ones(2))
        _, loaded = program_cache.load_or_compile("p", compile, None)
        assert not loaded and calls == [1] and not (tmp_path / program_cache.SUBDIR).exists()
    finally:
        program_cache.configure(None)


def test_a_damaged_entry_is_a_miss_and_is_replaced(cache_dir):
    x = jnp.arange(3.0)
    compile, calls = _compiler(lambda v: v * v, x)
    snap = _snapshot()
    program_cache.load_or_compile("p", compile, snap)
    [entry] = cache_dir.glob("*.program")
    entry.write_bytes(entry.read_bytes()[:100])  # a truncated file, as a crash mid-write of another tool leaves
    compiled, loaded = program_cache.load_or_compile("p", compile, snap)
    assert not loaded and len(calls) == 2
    np.testing.assert_array_equal(np.asarray(compiled(x)), [0, 1, 4])
    assert program_cache.load_or_compile("p", compile, snap)[1]  # the rewritten entry loads


def test_an_edited_file_of_rlpar_changes_the_key_even_at_the_same_size_and_time(cache_dir, tmp_path, monkeypatch):
    package = tmp_path / "pkg"
    package.mkdir()
    module = package / "code.py"
    module.write_text("SCALE = 2.0\n")
    monkeypatch.setattr(program_cache, "_own_roots", lambda: [package])
    before = _snapshot()
    stat = module.stat()
    module.write_text("SCALE = 3.0\n")  # the same size
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same modification time: only the bytes
    after = _snapshot()
    assert before.key("p") != after.key("p")
    assert _snapshot().key("p") == after.key("p")  # and stable while nothing changes


def test_environment_variables_that_shape_programs_change_the_key(cache_dir, monkeypatch):
    monkeypatch.delenv("RLPAR_PLAIN_LAYERS", raising=False)
    base = _snapshot().key("p")
    monkeypatch.setenv("RLPAR_PLAIN_LAYERS", "1")  # chooses the layers traced
    plain = _snapshot().key("p")
    monkeypatch.setenv("FLAX_SOME_FLAG", "1")  # read by flax's configuration
    flax_flag = _snapshot().key("p")
    assert len({base, plain, flax_flag}) == 3
    monkeypatch.setenv("RLPAR_TRACEBACK", "1")  # how errors print: not a program's input
    monkeypatch.setenv("SOMETHING_ELSE", "x")
    assert _snapshot().key("p") == flax_flag


def test_only_a_process_started_by_rlpars_command_line_with_nothing_else_loaded_is_closed(cache_dir):
    assert "is loaded" in program_cache.closed_run() or "__main__" in program_cache.closed_run()  # pytest, tests
    assert program_cache.snapshot("one", jax.devices()[:1]) is None  # so nothing is served here
    code = "from rlpar.run import program_cache; print(program_cache.closed_run())"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert script.stdout.startswith("__main__ has no file"), script.stderr[-2000:]


def test_a_module_first_imported_while_compiling_is_stored_only_if_the_key_covers_it(cache_dir, tmp_path, monkeypatch):
    (tmp_path / "imported_while_tracing.py").write_text("FACTOR = 5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    x = jnp.ones(2)

    def compile_importing_user_code():
        import imported_while_tracing  # a user's file: not in the snapshot taken before

        return jax.jit(lambda v: v * imported_while_tracing.FACTOR).lower(x).compile()

    snap = _snapshot()
    compiled, loaded = program_cache.load_or_compile("p", compile_importing_user_code, snap)
    assert not loaded and not list(cache_dir.glob("*.program"))  # used, not stored
    np.testing.assert_array_equal(np.asarray(compiled(x)), [5, 5])
    del sys.modules["imported_while_tracing"]
    assert program_cache.covered([np.__file__, jax.__file__, program_cache.__file__, os.__file__])
    assert not program_cache.covered([str(tmp_path / "imported_while_tracing.py")])


def test_packages_pip_installed_into_a_folder_on_the_path_are_covered_and_nothing_else_there(tmp_path, monkeypatch):
    # A machine with an accelerator may hold its JAX and packages in folders PYTHONPATH names (pip --target), not in
    # site-packages: what their dist-info records list is installed; a user's module put beside them is not.
    folder = tmp_path / "target"
    (folder / "tpkg").mkdir(parents=True)
    (folder / "tpkg" / "__init__.py").write_text("")
    (folder / "tsingle.py").write_text("")
    (folder / "tstray.py").write_text("")
    info = folder / "tpkg-1.0.dist-info"
    info.mkdir()
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("tpkg/__init__.py,sha256=x,0\ntsingle.py,sha256=y,0\n"
                                 "tpkg-1.0.dist-info/RECORD,,\n../../bin/tool,sha256=z,0\n")
    files = [str(folder / "tpkg" / "__init__.py"), str(folder / "tsingle.py")]
    assert not program_cache.covered(files[:1]) and not program_cache.covered(files[1:])  # not on the path yet
    monkeypatch.syspath_prepend(str(folder))
    assert program_cache.covered(files[:1]) and program_cache.covered(files[1:])
    assert not program_cache.covered([str(folder / "tstray.py")])
    before = program_cache.code_fingerprint()["installed"]
    info.rename(folder / "tpkg-1.1.dist-info")  # an upgrade: the key's code part changes
    after = program_cache.code_fingerprint()["installed"]
    assert (str(folder.resolve()), ["tpkg-1.0.dist-info"]) in before
    assert (str(folder.resolve()), ["tpkg-1.1.dist-info"]) in after
    # rlpar's own checkout on the path is never an install folder, even holding a dist-info
    checkout = tmp_path / "checkout"
    (checkout / "rlpar").mkdir(parents=True)
    (checkout / "stray-1.0.dist-info").mkdir()
    (checkout / "stray-1.0.dist-info" / "INSTALLER").write_text("pip\n")
    monkeypatch.setattr(program_cache, "_own_roots", lambda: [checkout / "rlpar"])
    monkeypatch.syspath_prepend(str(checkout))
    assert folder.resolve() in program_cache._target_folders()
    assert checkout.resolve() not in program_cache._target_folders()


def test_least_recently_used_entries_go_beyond_the_size_limit(cache_dir, monkeypatch):
    x = jnp.ones(4)
    snap = _snapshot()
    for name in ("a", "b", "c"):
        compile, _ = _compiler(lambda v: v - 1, x)
        program_cache.load_or_compile(name, compile, snap)
        os.utime(cache_dir / (snap.key(name) + program_cache.SUFFIX),
                 (1000 + ord(name), 1000 + ord(name)))  # a, then b, then c: distinct, ordered use times
    size = max(p.stat().st_size for p in cache_dir.glob("*.program"))
    monkeypatch.setattr(program_cache, "MAX_BYTES", 2 * size)
    compile, _ = _compiler(lambda v: v - 2, x)
    program_cache.load_or_compile("d", compile, snap)
    left = {p.name for p in cache_dir.glob("*.program")}
    assert left == {snap.key(n) + program_cache.SUFFIX for n in ("c", "d")}


def test_a_program_with_lapack_calls_runs_when_loaded_in_a_fresh_process(tmp_path):
    # The CPU backend binds LAPACK's kernels when a program using them is lowered; a loaded program is not lowered.
    # Without setting them up first, this crashed the process (SIGSEGV) on the first call of a loaded init.
    code = textwrap.dedent(f"""
        import jax, jax.numpy as jnp, numpy as np
        from rlpar.run import program_cache
        program_cache.configure({str(tmp_path)!r})
        x = jnp.asarray([[2.0, 1.0], [1.0, 3.0]])
        snap = program_cache.snapshot("qr", jax.devices()[:1], require_closed=False)
        compiled, loaded = program_cache.load_or_compile(
            "qr", lambda: jax.jit(lambda m: jnp.linalg.qr(m)[1]).lower(x).compile(), snap)
        print(loaded, np.round(np.abs(np.asarray(compiled(x))), 4).tolist())
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr[-2000:]
    assert runs[0].stdout.split(" ", 1)[0] == "False" and runs[1].stdout.split(" ", 1)[0] == "True"
    assert runs[0].stdout.split(" ", 1)[1] == runs[1].stdout.split(" ", 1)[1]


def test_only_rlpars_agents_on_built_in_env_ids_are_cacheable(tmp_path, monkeypatch):
    import gymnax

    import envs
    from examples.a2c import SPEC as A2C, A2CConfig

    monkeypatch.setattr(program_cache, "closed_run", lambda: None)  # as if started by rlpar's command line
    config = PPOConfig(num_envs=4, num_steps=8, total_timesteps=96, num_minibatches=2, hidden_sizes=(8,))

    def prepare(config=config, env=None, spec=agents.ppo.SPEC, **run):
        run = {"devices": 1, "compile_cache": str(tmp_path), **run}
        return runner._prepare(spec, config, RunConfig(**run), env, None)

    try:
        by_id, instance = prepare(), prepare(env=gymnax.make("CartPole-v1")[0])
        assert by_id.programs is not None and instance.programs is None  # an instance's attributes are not code
        assert prepare(env="envs.probe_envs:OneStep").programs is None  # module:attribute: a user's target
        envs.register("CartPole-mine", lambda: gymnax.make("CartPole-v1"))
        assert prepare(env="CartPole-mine").programs is None  # an id a user's code added
        assert prepare(A2CConfig(num_envs=4, num_steps=8, total_timesteps=96), spec=A2C).programs is None
        other = prepare(config.replace(hidden_sizes=(16,)))
        elsewhere = prepare(run_dir=str(tmp_path / "r"), checkpoint_every=1)
        assert other.programs.key("init") != by_id.programs.key("init")  # another config: another program
        two_devices = prepare(devices=2)
        assert two_devices.programs.key("init") != by_id.programs.key("init")  # another device count: another one
        assert prepare(backend="shard_map").programs.key("init") != by_id.programs.key("init")
        assert elsewhere.programs.key("init") == by_id.programs.key("init")  # where it writes: the same program
        assert prepare(config.replace(seed=7)).programs.key("init") == by_id.programs.key("init")  # an argument
        searched = [prepare(config.replace(seed=s), search="lr=1e-4..1e-3", population=2) for s in (0, 7)]
        assert searched[0].programs.key("init") != searched[1].programs.key("init")  # draws made from the seed
        assert prepare(compile_cache="off").programs is None
    finally:
        envs.registry._FACTORIES.pop("CartPole-mine", None)
        envs.registry._REGISTERED.discard("CartPole-mine")
        compile_cache.enable("off")  # as the suite runs (conftest)


def _train(cwd: Path, *flags: str, **environment: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), **environment}
    env.pop("RLPAR_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, "-m", "rlpar.train", *flags], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _metrics(run_dir: Path) -> list:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_warm_cli_run_loads_the_saved_programs_and_trains_bit_identically(tmp_path):
    # The README's path: the same command twice, fresh processes, relative paths.
    first = _train(tmp_path, "ppo", *TINY, "--compile-cache", "cache", "--run-dir", "one")
    assert "compiled in" in first and "saved program" not in first
    second = _train(tmp_path, "ppo", *TINY, "--compile-cache", "cache", "--run-dir", "two")
    assert "(from the compilation cache: the saved program)" in second
    assert len(list((tmp_path / "cache" / program_cache.SUBDIR).glob("*.program"))) == 2  # init and chunk
    assert _metrics(tmp_path / "one") == _metrics(tmp_path / "two")  # every logged number, bit for bit


@pytest.mark.slow  # six CLI runs (about 50 s alone, more on a loaded host); CI runs it (-m slow)
def test_another_seed_loads_the_saved_program_and_another_config_or_layer_switch_does_not(tmp_path):
    first = _train(tmp_path, "ppo", *TINY_NO_EVAL, "--compile-cache", "cache", "--run-dir", "one")
    assert "compiled in" in first and "saved program" not in first
    # Another seed runs the same program (its seed is an argument): served, and as a fresh compile of it trains
    seeded = _train(tmp_path, "ppo", *TINY_NO_EVAL, "--compile-cache", "cache", "--run-dir", "seed1", "--seed", "1")
    assert "(from the compilation cache: the saved program)" in seeded
    _train(tmp_path, "ppo", *TINY_NO_EVAL, "--no-compile-cache", "--run-dir", "seed1-fresh", "--seed", "1")
    assert _metrics(tmp_path / "seed1") == _metrics(tmp_path / "seed1-fresh") != _metrics(tmp_path / "one")
    third = _train(tmp_path, "ppo", *TINY_NO_EVAL, "--compile-cache", "cache", "--gamma", "0.9")  # another config
    assert "compiled in" in third and "from the compilation cache" not in third
    # The layers' switch flipped: another program (it was once served the fast path's), the one a fresh compile gives
    plain = _train(tmp_path, "ppo", *TINY_NO_EVAL, "--compile-cache", "cache", "--run-dir", "plain", RLPAR_PLAIN_LAYERS="1")
    assert "compiled in" in plain and "saved program" not in plain
    _train(tmp_path, "ppo", *TINY_NO_EVAL, "--no-compile-cache", "--run-dir", "fresh", RLPAR_PLAIN_LAYERS="1")
    assert _metrics(tmp_path / "plain") == _metrics(tmp_path / "fresh")


# A user's env whose reward comes from a data file read at import, an environment variable and a helper module; every
# episode is one step, so the logged episode return is the reward: SCALE * FACTOR * BONUS.
USER_ENV = """
import json, os, pathlib
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces
import reward_helper

SCALE = json.loads(pathlib.Path("level.json").read_text())["scale"]
FACTOR = float(os.environ.get("LEVEL_FACTOR", "1"))


@struct.dataclass
class State(environment.EnvState):
    pass


class Level(environment.Environment):
    @property
    def default_params(self):
        return environment.EnvParams(max_steps_in_episode=10)

    def reset_env(self, key, params):
        return jnp.zeros(2), State(time=0)

    def step_env(self, key, state, action, params):
        reward = jnp.float32(SCALE * FACTOR * reward_helper.BONUS)
        return jnp.zeros(2), State(time=state.time + 1), reward, jnp.bool_(True), {}

    def is_terminated(self, state, params):
        return jnp.bool_(True)

    def action_space(self, params=None):
        return spaces.Discrete(2)

    def observation_space(self, params):
        return spaces.Box(-1.0, 1.0, (2,), jnp.float32)
"""


@pytest.mark.slow  # moved out of the default run for its length; CI runs the slow set too
def test_a_user_env_trains_on_its_changed_data_file_environment_variable_and_helper_module(tmp_path):
    (tmp_path / "level_env.py").write_text(USER_ENV)
    (tmp_path / "level.json").write_text('{"scale": 2.0}')
    (tmp_path / "reward_helper.py").write_text("BONUS = 1.0\n")
    flags = ["ppo", "--env", "level_env:Level", "--num-envs", "4", "--num-steps", "4", "--total-timesteps", "32",
             "--num-minibatches", "2", "--hidden-sizes", "8", "--log-every", "2", "--eval-every", "0",
             "--compile-cache", "cache"]

    def returns(run_dir, **environment):
        _train(tmp_path, *flags, "--run-dir", run_dir, **{"LEVEL_FACTOR": "1", **environment})
        return {record["episode_return"] for record in _metrics(tmp_path / run_dir)}

    assert returns("first") == {2.0}
    (tmp_path / "level.json").write_text('{"scale": 3.0}')  # the data file: same module, same flags
    assert returns("data") == {3.0}
    assert returns("variable", LEVEL_FACTOR="5") == {15.0}  # an environment variable the env reads
    (tmp_path / "reward_helper.py").write_text("BONUS = 7.0\n")  # a module the env imports
    assert returns("helper", LEVEL_FACTOR="5") == {105.0}
    assert not list((tmp_path / "cache" / program_cache.SUBDIR).glob("*.program"))  # JAX's cache served them


def test_a_program_from_jax_cache_is_not_stored_and_the_next_run_compiles_and_stores_it(tmp_path):
    # XLA:CPU re-serializes an executable loaded from JAX's cache without some of its functions; stored, it failed
    # when loaded ("Function iota_concatenate_fusion not found"). So only programs compiled here are stored: a run
    # whose program came from JAX's cache leaves a marker, and the next run with its key compiles without JAX's cache.
    code = textwrap.dedent(f"""
        import sys, jax, jax.numpy as jnp, numpy as np
        from rlpar.run import compile_cache, program_cache
        program_cache.enable({str(tmp_path)!r})
        f = lambda x: jax.lax.fori_loop(0, 3, lambda i, v: jnp.sin(v) + i, jnp.concatenate([jnp.arange(8.0), x]))
        x = jnp.ones(4)
        snap = program_cache.snapshot(sys.argv[1], jax.devices()[:1], require_closed=False)
        compiled, loaded = program_cache.load_or_compile("p", lambda: jax.jit(f).lower(x).compile(), snap)
        print(loaded, compile_cache.hits(), np.asarray(compiled(x)).round(4).tolist())
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(description):
        proc = subprocess.run([sys.executable, "-c", code, description], env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.split(" ", 2)

    first = run("one")  # compiled, stored in both caches
    assert first[0] == "False"
    other = run("two")  # another key, the same HLO: JAX's cache has it; not stored under "two", a marker instead
    assert other[0] == "False" and int(other[1]) > 0
    assert len(list((tmp_path / program_cache.SUBDIR).glob("*.program"))) == 1
    assert len(list((tmp_path / program_cache.SUBDIR).glob("*" + program_cache.MARKER))) == 1
    again = run("two")  # compiled without JAX's cache, stored; the marker goes
    assert again[0] == "False" and len(list((tmp_path / program_cache.SUBDIR).glob("*.program"))) == 2
    assert not list((tmp_path / program_cache.SUBDIR).glob("*" + program_cache.MARKER))
    loaded = run("two")  # from now on, loaded whole
    assert loaded[0] == "True" and run("one")[0] == "True"
    assert first[2] == other[2] == again[2] == loaded[2]
