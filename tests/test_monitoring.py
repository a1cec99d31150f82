"""Profiling one chunk, per-device memory where the backend reports it, start-up time: written and readable."""

import gzip
import json
from types import SimpleNamespace

import jax

import agents
from rlpar.core import hosts
from rlpar.run import logs, progress
from rlpar.run.runner import RunConfig, run

TINY = agents.PPOConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 4, num_minibatches=2, hidden_sizes=(8,))


def test_profile_writes_a_trace_of_one_warm_chunk(tmp_path):
    run(agents.ppo.SPEC, TINY, RunConfig(devices=2, log_every=2, profile=str(tmp_path / "prof")))
    xplane = list((tmp_path / "prof").rglob("*.xplane.pb"))
    perfetto = list((tmp_path / "prof").rglob("*.trace.json.gz"))
    assert len(xplane) == 1 and xplane[0].stat().st_size > 0  # TensorBoard's profile plugin reads this
    with gzip.open(perfetto[0]) as f:  # Perfetto reads this
        events = json.load(f)["traceEvents"]
    assert any("pmap" in str(e.get("name", "")) or "jit" in str(e.get("name", "")) for e in events)


def test_memory_statistics_per_device_reach_timing_tensorboard_and_the_progress_line():
    def fake(device_id, peak):
        stats = {"bytes_in_use": peak // 2, "peak_bytes_in_use": peak}
        return SimpleNamespace(id=device_id, process_index=jax.process_index(), memory_stats=lambda: stats)

    memory = hosts.memory_stats([fake(0, 2**30), fake(1, 2**31)])
    assert memory == [{"device": 0, "bytes_in_use": 2**29, "peak_bytes_in_use": 2**30},
                      {"device": 1, "bytes_in_use": 2**30, "peak_bytes_in_use": 2**31}]
    record = {"update": 10, "env_steps": 80, "sps": 5.0, "time_s": 1.0, "episode_return": None, "memory": memory}
    deterministic, timing = logs.split_record(record)
    assert "memory" in timing and "memory" not in deterministic  # metrics.jsonl stays bit-identical
    assert logs.tensorboard_scalars(record)["perf/memory/device1/peak_bytes_in_use"] == 2**31
    assert progress.format_record(record, 100).endswith("peak mem 2.00 GiB")
    # a few MiB do not print as zero
    small = {**record, "memory": [{**d, "peak_bytes_in_use": 3_500_000} for d in record["memory"]]}
    assert progress.format_record(small, 100).endswith("peak mem 3.3 MiB")
    assert progress.format_bytes(300 * 2 ** 20) == "300 MiB"
    # XLA:CPU reports no memory statistics: nothing recorded, nothing shown.
    assert hosts.memory_stats(jax.local_devices()[:2]) is None


def test_sweep_records_give_per_slot_tensorboard_tags():
    record = {"update": 1, "env_steps": 8, "episode_return": 3.0,
              "slots": [{"episode_return": 1.0, "loss/total": 0.5}, {"episode_return": None, "loss/total": 0.25}]}
    scalars = logs.tensorboard_scalars(record)
    assert scalars["slot0/train/episode_return"] == 1.0 and scalars["slot1/loss/total"] == 0.25
    assert "slot1/train/episode_return" not in scalars and scalars["train/episode_return"] == 3.0
