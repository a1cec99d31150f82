"""Learning-curve plots: per-seed curves, the mean/std band (hand-checked), grouping runs, the PNG."""

import json

import numpy as np

from rlpar.run import rundir
from rlpar.run.rundir import FORMAT_VERSION as RUN_FORMAT_VERSION
from rlpar.tools import plot


def _fake_run(path, seed, returns, lr=1e-3, **config):
    """A run dir as the runner writes it, with chosen returns at env steps 10, 20, ..."""
    path.mkdir(parents=True)
    meta = {"format_version": RUN_FORMAT_VERSION, "agent": "ppo", "run": {"env": "CartPole-v1"}, "num_devices": 1,
            "config": {"seed": seed, "lr": lr, **config}}
    (path / rundir.CONFIG).write_text(json.dumps(meta))
    lines = [json.dumps({"update": i + 1, "env_steps": 10 * (i + 1), "episode_return": r})
             for i, r in enumerate(returns)]
    (path / rundir.METRICS).write_text("\n".join(lines) + "\n")
    return str(path)


def test_band_is_mean_and_std_over_curves():
    # Curves [1, 3] and [3, 5] at steps 10, 20: mean [2, 4]; each point is 1 from the mean, so std [1, 1].
    b = plot.band([plot.Curve(np.array([10, 20]), np.array([1.0, 3.0])),
                   plot.Curve(np.array([10, 20]), np.array([3.0, 5.0]))])
    assert b.steps.tolist() == [10, 20] and b.mean.tolist() == [2.0, 4.0] and b.std.tolist() == [1.0, 1.0]
    assert b.count == 2


def test_band_interpolates_onto_the_steps_every_curve_reached():
    # Curve A at 0, 20 -> interpolated 1.0 at 10; curve B stops at 10, so the band ends there.
    b = plot.band([plot.Curve(np.array([0, 20]), np.array([0.0, 2.0])),
                   plot.Curve(np.array([0, 10]), np.array([2.0, 3.0]))])
    assert b.steps.tolist() == [0, 10] and b.mean.tolist() == [1.0, 2.0]


def test_a_record_list_of_per_seed_returns_gives_one_curve_per_seed():
    records = [{"env_steps": 10, "episode_return": [1.0, None]}, {"env_steps": 20, "episode_return": [2.0, 4.0]}]
    curves = plot.curves_from_records(records)
    assert [c.steps.tolist() for c in curves] == [[10, 20], [20]]
    assert [c.values.tolist() for c in curves] == [[1.0, 2.0], [4.0]]
    scalar = plot.curves_from_records([{"env_steps": 10, "episode_return": None},
                                       {"env_steps": 20, "episode_return": 3}])
    assert len(scalar) == 1 and scalar[0].steps.tolist() == [20]


def test_runs_differing_only_in_seed_share_a_group(tmp_path):
    a = _fake_run(tmp_path / "a", 0, [1, 2])
    b = _fake_run(tmp_path / "b", 1, [3, 4])
    c = _fake_run(tmp_path / "c", 0, [5, 6], lr=1e-2)
    assert plot.group_runs([a, b, c]) == {"lr=0.001": [a, b], "lr=0.01": [c]}
    assert plot.group_runs([a, b]) == {"ppo on CartPole-v1": [a, b]}


def test_a_run_written_before_a_config_field_groups_with_one_that_has_its_old_value(tmp_path):
    old = _fake_run(tmp_path / "old", 0, [1, 2])  # no collector_unroll: the field came later
    new = _fake_run(tmp_path / "new", 1, [3, 4], collector_unroll=0)
    other = _fake_run(tmp_path / "other", 2, [5, 6], collector_unroll=1)
    assert plot.group_runs([old, new]) == {"ppo on CartPole-v1": [old, new]}
    assert plot.group_runs([new, old]) == {"ppo on CartPole-v1": [new, old]}
    assert plot.group_runs([new, other, old]) == {"collector_unroll=0": [new, old], "collector_unroll=1": [other]}


def test_plot_cli_writes_a_png(tmp_path, capsys):
    from PIL import Image

    runs = [_fake_run(tmp_path / f"seed{s}", s, list(np.linspace(10, 100, 8) + 5 * s)) for s in range(3)]
    out = tmp_path / "curve.png"
    assert plot.main([*runs, "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    with Image.open(out) as image:
        assert image.format == "PNG" and image.size[0] >= 600


def test_plot_of_a_dir_without_metrics_is_a_clear_error(tmp_path, capsys):
    assert plot.main([str(tmp_path)]) == 2
    assert "config.json is missing" in capsys.readouterr().err


def test_plot_without_any_finished_episode_is_a_clear_error(tmp_path, capsys):
    run = _fake_run(tmp_path / "run", 0, [None, None])
    assert plot.main([run, "--out", str(tmp_path / "x.png")]) == 2
    assert "no curve has an episode return to plot" in capsys.readouterr().err
