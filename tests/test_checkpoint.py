"""Checkpoints: kill and resume bit-identically, incomplete checkpoints ignored, bad run dirs rejected, NaN guard."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import TINY_RUN_ARGV

import agents
from agents.ppo import PPOConfig
from rlpar.run import checkpoint, rundir
from rlpar.run.checkpoint import Checkpoints
from rlpar.run.guard import NonFiniteError
from rlpar.run.runner import RunConfig, run
from rlpar.tools import train as train_cli

REPO = Path(__file__).resolve().parents[1]
SIGKILL_AFTER = Path(__file__).with_name("sigkill_after.py")


def _final_state(run_dir: Path):
    checkpoints = Checkpoints(run_dir / rundir.CHECKPOINTS)
    return checkpoints.restore(checkpoints.latest()).state


def _assert_trees_equal(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    jax.tree.map(np.testing.assert_array_equal, a, b)


def test_sigkill_between_checkpoints_then_resume_is_bit_identical_evaluations_included(tiny_run_dir, tmp_path,
                                                                                      capsys):
    run_dir = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, str(SIGKILL_AFTER), "3", *TINY_RUN_ARGV, "--run-dir", str(run_dir)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    # Killed after update 3's metrics line, before the checkpoint of update 4: one checkpoint (update 2) and a line
    # beyond it that resuming must drop.
    assert Checkpoints(run_dir / rundir.CHECKPOINTS).committed_steps() == [2]
    assert len((run_dir / rundir.METRICS).read_text().splitlines()) == 3
    # What a kill during the next checkpoint would leave: orbax's temporary directory, and a step directory without
    # the commit marker (killed between orbax's rename and the marker). Neither may be taken for a checkpoint.
    (run_dir / rundir.CHECKPOINTS / "4.orbax-checkpoint-tmp-1234").mkdir()
    shutil.copytree(run_dir / rundir.CHECKPOINTS / "2", run_dir / rundir.CHECKPOINTS / "4")
    (run_dir / rundir.CHECKPOINTS / "4" / checkpoint.COMMIT_MARKER).unlink()

    assert train_cli.main(["--resume", str(run_dir)]) == 0
    said = capsys.readouterr().out  # what the resumed run said, in order
    assert said.index(f"restoring the newest checkpoint of {run_dir} ...") < said.index("resumed from update 2")

    assert (run_dir / rundir.METRICS).read_bytes() == (tiny_run_dir / rundir.METRICS).read_bytes()
    # ... evaluations included: update 3's, logged before the kill and run again after the resume, and update 6's.
    records = [json.loads(line) for line in (run_dir / rundir.METRICS).read_text().splitlines()]
    assert [r["update"] for r in records if "eval/episode_return" in r] == [3, 6]
    assert len((run_dir / rundir.TIMING).read_text().splitlines()) == 6
    # The whole final state: parameters, optimizer state, every device's envs, observations and keys, counters.
    _assert_trees_equal(_final_state(run_dir), _final_state(tiny_run_dir))
    assert Checkpoints(run_dir / rundir.CHECKPOINTS).committed_steps() == [4, 6]


def test_checkpoint_holds_every_devices_state_and_the_run_position(tiny_run_dir):
    checkpoints = Checkpoints(tiny_run_dir / rundir.CHECKPOINTS)
    assert checkpoints.committed_steps() == [4, 6]  # every 2 updates and at the end; the newest KEEP=2 kept
    restored = checkpoints.restore(6)
    state = restored.state
    keys = state["rollout"]["key"]
    assert keys.shape[0] == 2 and not np.array_equal(keys[0], keys[1])  # devices act with different keys
    assert state["rollout"]["obs"].shape == (2, 2, 4)  # [devices, envs per device, obs]
    jax.tree.map(lambda x: np.testing.assert_array_equal(x[0], x[1]), state["agent"]["params"])  # replicated
    assert restored.position.updates_done == 6 and restored.position.num_records == 6
    assert restored.position.metrics_bytes == (tiny_run_dir / rundir.METRICS).stat().st_size
    assert restored.meta["config"]["num_envs"] == 4 and restored.meta["num_devices"] == 2


def test_incomplete_checkpoint_directories_are_not_checkpoints(tmp_path):
    checkpoints = Checkpoints(tmp_path)
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / checkpoint.COMMIT_MARKER).write_text('{"step": 2}\n')
    (tmp_path / "4").mkdir()  # renamed by orbax, never marked
    (tmp_path / "6.orbax-checkpoint-tmp-17").mkdir()  # never finalised by orbax
    assert checkpoints.committed_steps() == [2] and checkpoints.latest() == 2
    assert [p.name for p in checkpoints.uncommitted()] == ["4", "6.orbax-checkpoint-tmp-17"]
    checkpoints.discard_uncommitted()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2"]


def _copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _no_config(run_dir: Path):
    (run_dir / rundir.CONFIG).unlink()


def _future_version(run_dir: Path):
    meta = json.loads((run_dir / rundir.CONFIG).read_text())
    meta["format_version"] = 999
    (run_dir / rundir.CONFIG).write_text(json.dumps(meta))


def _no_checkpoint(run_dir: Path):
    shutil.rmtree(run_dir / rundir.CHECKPOINTS)


def _corrupt_checkpoint(run_dir: Path):
    for path in (run_dir / rundir.CHECKPOINTS / "6" / "state").rglob("*"):
        if path.is_file() and path.name != "commit_success.txt":
            path.write_bytes(b"garbage")


@pytest.mark.parametrize(
    "damage, extra, message",
    [
        (_no_config, [], "config.json is missing"),
        (_future_version, [], "has format_version=999; this rlpar reads format_version"),
        (_no_checkpoint, [], "no complete checkpoint in"),
        (_corrupt_checkpoint, [], "checkpoints/6 is corrupt ("),
        (None, ["--num-envs", "8"], "drop --num-envs 8"),
    ],
    ids=["no-config", "incompatible-version", "no-checkpoint", "corrupt-checkpoint", "extra-flags"],
)
def test_resume_of_a_bad_run_dir_is_a_clear_error(tiny_run_dir, tmp_path, capsys, damage, extra, message):
    run_dir = _copy_run(tiny_run_dir, tmp_path / "run")
    if damage is not None:
        damage(run_dir)
    assert train_cli.main(["ppo", "--resume", str(run_dir), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("error: ") and err.count("\n") == 1


def test_resume_of_a_missing_dir_and_a_fresh_run_into_a_used_dir_are_refused(tiny_run_dir, tmp_path, capsys):
    assert train_cli.main(["--resume", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    run_dir = _copy_run(tiny_run_dir, tmp_path / "run")
    assert train_cli.main([*TINY_RUN_ARGV, "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "already holds checkpoints (updates 4, 6) of an earlier run: continue it with --resume" in err


def test_resume_with_other_settings_than_the_checkpoint_is_refused(tiny_run_dir, tmp_path):
    run_dir = _copy_run(tiny_run_dir, tmp_path / "run")
    config = PPOConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 6, num_minibatches=2, update_epochs=1,
                       hidden_sizes=(16, 16), gamma=0.9, anneal_lr=False)  # anneal_lr: the CartPole preset's
    with pytest.raises(checkpoint.CheckpointError, match="written with gamma=0.99 but this run has gamma=0.9"):
        run(agents.ppo.SPEC, config, RunConfig(devices=2, run_dir=str(run_dir), log_every=1), resume=True)


def test_a_run_dir_written_before_a_config_field_existed_resumes_with_its_old_value(tiny_run_dir, tmp_path,
                                                                                    monkeypatch, capsys):
    run_dir = _copy_run(tiny_run_dir, tmp_path / "run")
    meta = json.loads((run_dir / rundir.CONFIG).read_text())
    for name in rundir.CONFIG_FIELDS_ADDED:
        del meta["config"][name]
    (run_dir / rundir.CONFIG).write_text(json.dumps(meta))
    read_meta = Checkpoints.read_meta

    def written_before(self, step):  # the checkpoint's own copy of the settings, as such a run wrote it
        saved = read_meta(self, step)
        return {**saved, "config": {k: v for k, v in saved["config"].items() if k not in rundir.CONFIG_FIELDS_ADDED}}

    monkeypatch.setattr(Checkpoints, "read_meta", written_before)
    # The env's preset asking for another value now (as Breakout-MinAtar's accelerator preset asks for one collector
    # step) must not change what the resumed run takes: the value the run was written with.
    from agents.ppo.presets import PRESETS

    monkeypatch.setitem(PRESETS, "CartPole-v1", {**PRESETS["CartPole-v1"], "collector_unroll": 1})
    assert train_cli.main(["--resume", str(run_dir)]) == 0, capsys.readouterr().err


def test_nonfinite_loss_stops_the_run_naming_the_update_and_keeps_the_last_good_checkpoint(tmp_path):
    # Adam moves every parameter by ~lr per step: after one step at 1e30 they are huge but finite; the next value
    # loss squares values of that size, far past float32's largest (about 3e38) however XLA compiled it (at 1e18 the
    # loss stayed finite, just, when compiled without optimisations). One minibatch per update, so each update's
    # loss is computed before its only step.
    config = PPOConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 8, num_minibatches=1, update_epochs=1,
                       hidden_sizes=(16, 16), lr=1e30, anneal_lr=False)
    run_dir = tmp_path / "nan"
    with pytest.raises(NonFiniteError, match=r"non-finite loss or parameters at update (\d+)") as info:
        run(agents.ppo.SPEC, config, RunConfig(devices=2, run_dir=str(run_dir), log_every=1, checkpoint_every=1))
    bad = int(re.search(r"at update (\d+)", str(info.value)).group(1))
    assert bad >= 2, "the test needs a checkpoint before the divergence"
    checkpoints = Checkpoints(run_dir / rundir.CHECKPOINTS)
    assert checkpoints.latest() == bad - 1
    assert f"the last good checkpoint is {checkpoints.path(bad - 1)}" in str(info.value)
    restored = checkpoints.restore(bad - 1)
    assert restored.position.updates_done == bad - 1
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(restored.state["agent"]["params"]))
    assert len((run_dir / rundir.METRICS).read_text().splitlines()) == bad - 1  # nothing logged from the bad update


def test_a_setting_that_changes_the_state_shape_is_named_not_reported_as_unreadable(tiny_run_dir, tmp_path):
    # anneal_lr adds a schedule count to the optimizer state: the settings are compared before the state is read
    run_dir = _copy_run(tiny_run_dir, tmp_path / "run")
    saved = json.loads((run_dir / "config.json").read_text())["config"]["anneal_lr"]
    config = PPOConfig(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 6, num_minibatches=2, update_epochs=1,
                       hidden_sizes=(16, 16), anneal_lr=not saved)
    with pytest.raises(checkpoint.CheckpointError, match=f"written with anneal_lr={saved} but this run has "
                                                         f"anneal_lr={not saved}"):
        run(agents.ppo.SPEC, config, RunConfig(devices=2, run_dir=str(run_dir), log_every=1), resume=True)
