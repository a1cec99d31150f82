"""``benchmarks/dense_paths.py`` as its docstring runs it: both Dense paths timed in one process, one JSON record."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # moved out of the default run for its length; CI runs the slow set too
def test_both_paths_timed_and_recorded(tmp_path):
    out = tmp_path / "dense.jsonl"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "dense_paths.py"), "--num-envs", "2", "--num-steps", "8",
         "--hidden-sizes", "8", "--updates", "1", "--rounds", "2", "--repeats", "1", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["fast_ms"] > 0 and record["plain_ms"] > 0 and record["rounds"] == 2
    low, high = record["plain_over_fast_range"]
    assert low <= record["plain_over_fast"] <= high
    assert record["minibatch_rows"] == 2 * 8 // 4  # PPO's default 4 minibatches
    assert record["default_path"] == "fast"  # a small batch: fast on either ISA
    assert record["cpu"] and record["hidden_sizes"] == [8] and record["num_envs"] == 2
    assert "plain / fast" in proc.stderr


@pytest.mark.parametrize("flags,message", [(["--rounds", "0"], "--rounds=0: must be at least 1"),
                                           (["--env", "Nope"], "--env: unknown env 'Nope'"),
                                           (["--hidden-sizes", "8,x"], "--hidden-sizes='8,x': expected positive")])
def test_bad_input_is_one_line(tmp_path, flags, message):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "dense_paths.py"), *flags], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
