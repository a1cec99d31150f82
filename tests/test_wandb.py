"""``--wandb``: a Weights & Biases run holding the same scalars as TensorBoard and the run's config, read back from
its offline files (``WANDB_MODE=offline``); a resumed run continues the same wandb run."""

import json
import shutil
import struct

import pytest

from rlpar.run import rundir
from rlpar.run.logs import tensorboard_scalars
from rlpar.tools import train as train_cli

wandb_proto = pytest.importorskip("wandb.proto.wandb_internal_pb2", reason="needs the wandb extra: "
                                  "pip install -e \".[wandb]\"")

ARGV = ["ppo", "--env", "CartPole-v1", "--devices", "2", "--num-envs", "4", "--num-steps", "8",
        "--total-timesteps", str(4 * 8 * 6), "--num-minibatches", "2", "--update-epochs", "1",
        "--hidden-sizes", "16,16",
        "--log-every", "2", "--checkpoint-every", "2", "--eval-every", "4", "--eval-episodes", "4", "--num-seeds", "2",
        "--wandb", "--wandb-project", "rlpar-test"]


def read_wandb_file(path):
    """The records of a ``.wandb`` file: a 7-byte header (``:W&B``, magic, version), then LevelDB's log format
    (32 KiB blocks of chunks: crc32, length, type 1 full / 2 first / 3 middle / 4 last) around protobuf records."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, records, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            break
        pending = (b"" if kind in (1, 2) else pending) + data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_proto.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def offline_runs(wandb_dir):
    """``[(run record, config dict, [history dicts])]``, one per offline run directory, oldest first."""
    runs = []
    for path in sorted(wandb_dir.glob("wandb/offline-run-*/run-*.wandb")):
        run, history = None, []
        for record in read_wandb_file(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run = record.run
            elif kind == "history":
                history.append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                for item in record.history.item})
        config = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in run.config.update}
        runs.append((run, config, history))
    return runs


def logged(history):
    """The values rlpar logged (wandb's own ``_step``, ``_runtime``, ``_timestamp`` left out), by update."""
    return {h["update"]: {k: v for k, v in h.items() if not k.startswith("_")} for h in history}


@pytest.mark.slow  # moved out of the default run for its length; CI runs the slow set too
def test_wandb_offline_run_holds_the_scalars_and_config_and_resume_continues_it(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_files"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wandb_files").mkdir()
    run_dir = tmp_path / "run"
    assert train_cli.main([*ARGV, "--run-dir", str(run_dir)]) == 0

    run_id = (run_dir / rundir.WANDB_RUN_ID).read_text().strip()
    [(run, config, history)] = offline_runs(tmp_path / "wandb_files")
    assert run.run_id == run_id and run.project == "rlpar-test" and run.display_name == "run"
    meta = json.loads((run_dir / rundir.CONFIG).read_text())
    assert config["agent"] == "ppo" and config["config"]["num_envs"] == 4 and config["run"] == meta["run"]
    records = [{**json.loads(m), **json.loads(t)} for m, t in zip((run_dir / "metrics.jsonl").read_text().splitlines(),
                                                                  (run_dir / "timing.jsonl").read_text().splitlines())]
    assert [r["update"] for r in records] == [2, 4, 6]
    by_update = logged(history)
    for record in records:  # every TensorBoard scalar, per slot too, against env steps
        expected = {**tensorboard_scalars(record), "env_steps": record["env_steps"], "update": record["update"]}
        assert by_update[record["update"]] == pytest.approx(expected)
    assert "slot1/train/episode_return" in by_update[6] and "eval/episode_return" in by_update[4]

    # As if killed before its last checkpoint: the run resumes from update 4's, into the same wandb run.
    shutil.rmtree(run_dir / rundir.CHECKPOINTS / "6")
    assert train_cli.main(["--resume", str(run_dir)]) == 0
    first, (resumed, resumed_config, resumed_history) = offline_runs(tmp_path / "wandb_files")
    assert resumed.run_id == run_id and resumed.project == "rlpar-test"
    assert not resumed_config.get("agent")  # the config was sent by the fresh run
    assert sorted(logged(resumed_history)) == [6]
    deterministic = lambda values: {k: v for k, v in values.items() if not k.startswith("perf/")}  # noqa: E731
    assert deterministic(logged(resumed_history)[6]) == pytest.approx(deterministic(by_update[6]))
