"""``python -m rlpar.train ... --dry-run`` (or ``--check``): every check a run makes, what it would train, exit 0;
nothing compiled, written or joined."""

import json
import shutil

import pytest

from rlpar.run import build, chunks
from rlpar.tools import train as train_cli


@pytest.fixture
def no_compiling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a dry run compiled")

    monkeypatch.setattr(build, "build_programs", refuse)
    monkeypatch.setattr(chunks, "compile_programs", refuse)


@pytest.mark.parametrize("flag", train_cli.DRY_RUN_FLAGS)
def test_a_dry_run_says_what_it_would_train_and_writes_nothing(flag, tmp_path, capsys, no_compiling):
    run_dir = tmp_path / "runs" / "pbt"
    argv = ["ppo", "--env", "CartPole-v1", "--devices", "2", "--total-timesteps", "100000", "--search",
            "lr=log:1e-4..1e-2", "--search", "ent_coef=0..0.05", "--population", "8", "--pbt", "--run-dir",
            str(run_dir), flag]
    assert train_cli.main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"rlpar: ppo on CartPole-v1, 2 cpu device(s), 8 envs x 128 steps, 97 updates, run dir {run_dir}"
    text = "\n".join(out)
    assert "train: 8 slot(s) (8 member(s) x 1 seed(s)) in one program, 99,328 env steps each" in text
    assert "members: 8 members drawn from lr log:0.0001..0.01, ent_coef 0..0.05" in text
    assert "member 7: lr=" in text and "PBT: a round every 10 updates" in text
    assert out[-1] == "dry run: every check passed; nothing was compiled or written"
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("argv, says", [
    (["--pbt-interval", "97"], "pbt_interval=97 is not shorter than the run"),
    (["--population-devices", "3"], "population_devices=3"),
    (["--run-dir", "FILE/sub"], "cannot be written: 'FILE' is a file"),
    (["--search", "gamma=0.9,1.5"], "gamma=1.5 (from --sweep/--search) is refused"),
], ids=["pbt-interval", "groups", "run-dir-under-a-file", "member-config"])
def test_a_dry_run_refuses_what_a_run_would(argv, says, tmp_path, capsys, no_compiling):
    (tmp_path / "FILE").write_text("not a directory")
    argv = [str(tmp_path / a) if a.startswith("FILE") else a for a in argv]
    base = ["ppo", "--total-timesteps", "100000", "--search", "lr=log:1e-4..1e-2", "--population", "4", "--pbt"]
    if "--search" in argv:
        base = ["ppo", "--total-timesteps", "100000"]
    assert train_cli.main([*base, *argv, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert says.replace("'FILE'", repr(str(tmp_path / "FILE"))) in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_dry_run_refuses_a_run_dir_of_an_earlier_run_and_checks_a_resume(tiny_run_dir, tmp_path, capsys,
                                                                            no_compiling):
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run_dir)
    assert train_cli.main(["ppo", "--run-dir", str(run_dir), "--dry-run"]) == 2
    assert "already holds checkpoints" in capsys.readouterr().err
    assert train_cli.main(["--resume", str(run_dir), "--dry-run"]) == 0
    out = capsys.readouterr().out
    updates = json.loads((run_dir / "config.json").read_text())["config"]["total_timesteps"] // 32  # 4 envs x 8
    assert f"resume: the run in {run_dir} is finished (update {updates} of {updates}): nothing to resume" in out
