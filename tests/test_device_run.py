"""``benchmarks/device_run.sh --quick`` on the CPU: the accelerator run's every part runs and writes its JSON lines.

The full run is for a machine with a GPU; ``--quick`` takes the same path (packages found or installed, host probed,
every row in a fresh process, rejax beside rlpar) with few envs and tiny budgets. rejax's rows run where its venv
(``python benchmarks/peers.py install``) or wheels for this Python exist, and are skipped, with a warning here,
where not (as in CI)."""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_quick_device_run_writes_positive_sps_for_every_row(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(["bash", "benchmarks/device_run.sh", "--quick", "--offline", "--out", str(out)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rejax_skipped = "rejax is not installed" in proc.stderr
    if rejax_skipped:
        warnings.warn("rejax is not installed here (no benchmarks/.peers/rejax-venv, no wheels for this Python): "
                      "device_run.sh skipped its rows")

    rollout = _read(out / "rollout.jsonl")
    assert sorted((r["program"], r["num_envs"]) for r in rollout) == [
        ("bare", 16), ("bare", 64), ("engine", 16), ("engine", 64)]
    for name, sizes in (("ppo_cartpole.jsonl", (1, 64)), ("ppo_breakout.jsonl", (8,))):
        records = _read(out / name)
        rows = sorted((r["program"], r["num_envs"]) for r in records)
        expected = [("rlpar", n) for n in sizes] + ([] if rejax_skipped else [("rejax", n) for n in sizes])
        assert rows == sorted(expected), name
    for record in rollout + _read(out / "ppo_cartpole.jsonl") + _read(out / "ppo_breakout.jsonl"):
        assert (record.get("sps_end_to_end") or record["sps_median"]) > 0, record
        assert record["cpu"] and record["time_utc"] and record["host_cpus"] >= 1  # common.host_fields
        assert record["backend"] == "cpu"

    summary = (out / "summary.md").read_text()
    assert summary in proc.stdout  # printed at the end too
    assert "| 64 envs |" in summary and "engine overhead" in summary
    assert ("Not measured" in summary) == rejax_skipped
