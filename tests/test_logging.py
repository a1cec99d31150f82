"""Run logs: bit-identical metrics.jsonl for the same seed, timing apart, TensorBoard events, progress display."""

import io
import json
import struct

import pytest
from conftest import TINY_RUN_ARGV

from rlpar.run import rundir
from rlpar.run.checkpoint import CheckpointError, Position
from rlpar.run.logs import TIMING_FIELDS, RunLogger, split_record, tensorboard_scalars
from rlpar.run.progress import ProgressDisplay, format_eta
from rlpar.tools import train as train_cli


def test_same_seed_and_devices_twice_give_a_bit_identical_metrics_file(tiny_run_dir, tmp_path):
    run_dir = tmp_path / "again"
    assert train_cli.main([*TINY_RUN_ARGV, "--run-dir", str(run_dir)]) == 0
    assert (run_dir / rundir.METRICS).read_bytes() == (tiny_run_dir / rundir.METRICS).read_bytes()
    records = [json.loads(line) for line in (run_dir / rundir.METRICS).read_text().splitlines()]
    timing = [json.loads(line) for line in (run_dir / rundir.TIMING).read_text().splitlines()]
    assert [r["update"] for r in records] == [t["update"] for t in timing] == [1, 2, 3, 4, 5, 6]
    assert not set(TIMING_FIELDS) & set(records[0])
    assert {"time_s", "sps", "startup_s"} <= set(timing[0])  # memory only where the backend reports it (not CPU)
    assert {"episode_return", "loss/total", "env_steps"} <= set(records[0])


def _events(directory):
    """(tag, step, value) of every scalar in the TensorBoard event files under ``directory``."""
    from tensorboardX.proto import event_pb2

    found = []
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):  # TFRecord framing: u64 length, u32 crc, payload, u32 crc
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12:offset + 12 + length])
            offset += 12 + length + 4
            found += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
    return found


def test_tensorboard_events_hold_the_metrics_against_env_steps(tiny_run_dir):
    events = _events(tiny_run_dir / rundir.TENSORBOARD)
    records = [json.loads(line) for line in (tiny_run_dir / rundir.METRICS).read_text().splitlines()]
    losses = [(step, value) for tag, step, value in events if tag == "loss/total"]
    assert losses == [(r["env_steps"], pytest.approx(r["loss/total"])) for r in records]
    tags = {tag for tag, _, _ in events}
    assert {"train/episode_return", "perf/sps", "loss/policy"} <= tags


def test_tensorboard_tags_namespace_each_field():
    record = {"update": 3, "env_steps": 96, "episode_return": None, "episodes": 0, "sps": 10.0, "loss/value": 2.0}
    assert tensorboard_scalars(record) == {"train/episodes": 0.0, "perf/sps": 10.0, "loss/value": 2.0}


def test_records_split_into_deterministic_and_timing_parts():
    metrics, timing = split_record({"update": 2, "env_steps": 64, "time_s": 0.5, "sps": 128.0, "loss/total": 1.0})
    assert metrics == {"update": 2, "env_steps": 64, "loss/total": 1.0}
    assert timing == {"update": 2, "time_s": 0.5, "sps": 128.0}


def _record(update):
    return {"update": update, "env_steps": 10 * update, "time_s": 0.1, "sps": 100.0, "episode_return": float(update)}


def test_logger_resumes_by_cutting_the_files_back_to_the_checkpoint(tmp_path):
    logger = RunLogger(tmp_path)
    logger.write(_record(1))
    logger.write(_record(2))
    logger.sync()
    position = logger.position(updates_done=2)
    logger.write(_record(3))  # written after the checkpoint, then the process dies
    logger.close()

    resumed = RunLogger(tmp_path, resume_at=position)
    assert resumed.previous_records == [_record(1), _record(2)]
    resumed.write(_record(3))
    resumed.close()
    lines = [json.loads(line) for line in (tmp_path / rundir.METRICS).read_text().splitlines()]
    assert [r["update"] for r in lines] == [1, 2, 3]
    assert len((tmp_path / rundir.TIMING).read_text().splitlines()) == 3


def test_logger_refuses_files_shorter_than_the_checkpoint_says(tmp_path):
    logger = RunLogger(tmp_path)
    logger.write(_record(1))
    logger.close()
    with pytest.raises(CheckpointError, match="metrics.jsonl has .* bytes but the checkpoint was written after"):
        RunLogger(tmp_path, resume_at=Position(1, 1, 10_000, 10_000))


def test_plain_progress_prints_one_line_per_chunk_with_an_eta():
    out = io.StringIO()  # not a terminal: plain lines
    with ProgressDisplay(num_updates=4, steps_per_update=10, stream=out) as show:
        show({"update": 2, "env_steps": 20, "time_s": 1.0, "sps": 20.0, "episode_return": 9.5, "loss/total": 0.1})
        show({"update": 4, "env_steps": 40, "time_s": 1.0, "sps": 20.0, "episode_return": None, "loss/total": 0.1})
    lines = out.getvalue().splitlines()
    # 2 updates took 1 s, 2 remain: eta 1 s; then none remain.
    assert lines[0].startswith("update      2/4") and "return      9.50" in lines[0] and lines[0].endswith("eta 1s")
    assert "return       n/a" in lines[1] and lines[1].endswith("eta 0s")


def test_live_progress_draws_a_bar_on_a_terminal():
    out = io.StringIO()
    with ProgressDisplay(num_updates=4, steps_per_update=10, start_update=2, stream=out, live=True) as show:
        show({"update": 4, "env_steps": 40, "time_s": 1.0, "sps": 20.0, "episode_return": 9.5, "loss/total": 0.1})
    text = out.getvalue()
    assert "update 4/4" in text and "steps 40/40" in text and "return 9.50" in text and "eta 0s" in text


def test_eta_format():
    assert [format_eta(s) for s in (None, 5.4, 75.2, 3725)] == ["?", "5s", "1m15s", "1h02m05s"]
