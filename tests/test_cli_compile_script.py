"""``benchmarks/cli_compile.py`` as its docstring runs it: a record per code tree and round with the CLI's compile
time and the process's CPU seconds, and a summary line per tree."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # two trees' cold compiles in fresh processes (about 14 s); CI runs it (-m slow)
def test_two_trees_one_round_give_a_record_each_and_a_summary(tmp_path):
    out = tmp_path / "compile.jsonl"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "cli_compile.py"), "--rounds", "1", "--no-rejax", "--code", ".",
         "--code", str(REPO), "--total-timesteps", "64", "--out", str(out), "--", "ppo", "--env", "CartPole-v1",
         "--num-envs", "4", "--num-steps", "8", "--num-minibatches", "2", "--update-epochs", "1",
         "--hidden-sizes", "8"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["code"] for r in records] == [str(REPO), str(REPO)] and {r["round"] for r in records} == {0}
    for record in records:
        assert record["compile_s"] > 0 and record["process_cpu_s"] >= record["compile_s"] / 4 and record["wall_s"] > 0
        assert record["cpu"] and record["cli"][:3] == ["ppo", "--env", "CartPole-v1"]
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
        if head.returncode == 0:  # the tree's commit (+ if changed); None outside git
            assert record["commit"] and head.stdout.startswith(record["commit"].rstrip("+"))
        else:
            assert record["commit"] is None
    summary = [line for line in proc.stderr.splitlines() if "compiled in" in line]
    assert len(summary) == 2 and "/ first" in summary[1] and "rejax" not in proc.stderr


def test_a_case_gives_rejax_the_same_config_and_an_unknown_case_is_one_line():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import cli_compile
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    cli, rejax = cli_compile.configs("ppo-minatar", [])
    assert cli == ["ppo", "--env", "Breakout-MinAtar"]
    assert rejax[:2] == ["--algo", "ppo"] and "--total-timesteps" not in rejax
    assert rejax[rejax.index("--hidden-sizes") + 1] == "256,256"
    assert rejax[rejax.index("--env") + 1] == "Breakout-MinAtar"
    assert cli_compile.configs(None, ["ppo", "--env", "CartPole-v1"]) == (["ppo", "--env", "CartPole-v1"], [])
    assert cli_compile.configs(None, ["dqn", "--env", "CartPole-v1"])[1] is None  # no known rejax config: rlpar only
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cli_compile.py"), "--case", "nope"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and proc.stderr.strip().splitlines()[-1].startswith("error: --case 'nope': one of ppo")
    assert "Traceback" not in proc.stderr


def test_a_code_tree_that_is_not_rlpar_is_one_line_before_anything_runs(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cli_compile.py"), "--code", str(tmp_path),
                           "--", "ppo", "--env", "CartPole-v1"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(f"--code {tmp_path}: not a checkout of rlpar (no "
                                                         "rlpar/train.py there)")
