"""JAX's persistent compilation cache, on by default: a second identical run loads its program from the cache."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = ["ppo", "--env", "CartPole-v1", "--num-envs", "4", "--num-steps", "8", "--total-timesteps", "96",
        "--num-minibatches", "2", "--hidden-sizes", "8", "--log-every", "3", "--eval-every", "0"]


def _train(cwd: Path, *flags: str, env_extra: dict | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("RLPAR_CACHE_DIR", None)
    env.update(env_extra or {})
    argv = list(TINY)
    for flag, value in zip(flags[::2], flags[1::2]):  # a flag is given once: its value replaces TINY's
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    argv += flags[len(flags) // 2 * 2:]  # a last flag without a value
    proc = subprocess.run([sys.executable, "-m", "rlpar.train", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow  # two training commands in fresh processes (about a minute); CI runs it (-m slow)
def test_second_identical_run_loads_its_program_from_the_cache(tmp_path):
    first = _train(tmp_path, "--compile-cache", "cache", "--run-dir", "cold")
    assert "compiled in" in first and "from the compilation cache" not in first
    assert any((tmp_path / "cache").iterdir())  # entries written, at the relative path given
    second = _train(tmp_path, "--compile-cache", "cache", "--run-dir", "warm")
    assert "from the compilation cache" in second
    # The loaded program trains as the compiled one did: every logged metric identical.
    cold, warm = ((tmp_path / run / "metrics.jsonl").read_text() for run in ("cold", "warm"))
    assert cold == warm and "loss/total" in cold
    # Another config is another program: compiled, never a stale one from the cache.
    other = _train(tmp_path, "--compile-cache", "cache", "--hidden-sizes", "16")
    assert "compiled in" in other and "from the compilation cache" not in other
    # Turned off, nothing is read from it (here the default directory, which holds the program).
    off = _train(tmp_path, "--no-compile-cache", env_extra={"RLPAR_CACHE_DIR": str(tmp_path / "cache")})
    assert "from the compilation cache" not in off
    # With no flag, the default directory ($RLPAR_CACHE_DIR here, else ~/.cache/rlpar/jax).
    out = _train(tmp_path, "--run-dir", "run", env_extra={"RLPAR_CACHE_DIR": str(tmp_path / "default")})
    assert any((tmp_path / "default").iterdir())
    # The start-up time (process start to the first update) is in the done line and the first timing record.
    startup = json.loads((tmp_path / "run" / "timing.jsonl").read_text().splitlines()[0])["startup_s"]
    assert 0 < startup < 300 and "s from process start to the first update" in out
