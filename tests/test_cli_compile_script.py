"""``benchmarks/cli_compile.py`` as its docstring runs it: a record per code tree and round with the CLI's compile
time and the process's CPU seconds, and a summary line per tree."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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
    summary = [line for line in proc.stderr.splitlines() if "compiled in" in line]
    assert len(summary) == 2 and "/ first" in summary[1] and "rejax" not in proc.stderr
