"""Sweep runs: one curve per swept value (over its seeds) in plots, one return per value on the progress line."""

import io
import json

import matplotlib.pyplot as plt
import numpy as np
import pytest

from rlpar.run import rundir
from rlpar.run.progress import ProgressDisplay, format_record, returns_by_label, slot_labels
from rlpar.run.rundir import FORMAT_VERSION as RUN_FORMAT_VERSION
from rlpar.tools import plot

# A --num-seeds 2 --sweep lr=1e-4,1e-3 run: slot i has seed index i % 2 and the value i // 2.
SWEEP_SLOTS = [{"slot": 0, "seed_index": 0, "lr": 0.0001}, {"slot": 1, "seed_index": 1, "lr": 0.0001},
               {"slot": 2, "seed_index": 0, "lr": 0.001}, {"slot": 3, "seed_index": 1, "lr": 0.001}]


def _fake_run(path, slot_returns, slots=SWEEP_SLOTS, seed=0, ent_coef=0.01):
    """A run dir as the runner writes it; ``slot_returns[k]`` holds each slot's return at env steps 10 * (k + 1)."""
    path.mkdir(parents=True)
    meta = {"format_version": RUN_FORMAT_VERSION, "agent": "ppo", "run": {"env": "CartPole-v1"}, "num_devices": 1,
            "config": {"seed": seed, "lr": 0.00025, "ent_coef": ent_coef}}
    if slots is not None:
        meta["slots"] = slots
    (path / rundir.CONFIG).write_text(json.dumps(meta))
    lines = []
    for k, returns in enumerate(slot_returns):
        per_slot = [{"episodes": 1, "episode_return": r} for r in returns]
        pooled = float(np.mean([r for r in returns if r is not None]))
        lines.append(json.dumps({"update": k + 1, "env_steps": 10 * (k + 1), "episode_return": pooled,
                                 "slots": per_slot}))
    (path / rundir.METRICS).write_text("\n".join(lines) + "\n")
    return str(path)


def _legend(fig) -> list[str]:
    return fig.axes[0].get_legend_handles_labels()[1]


def test_curves_are_grouped_by_the_label_of_their_slot():
    records = [{"env_steps": 10, "episode_return": 0, "slots": [{"episode_return": r} for r in (1, 3, 10, None)]},
               {"env_steps": 20, "episode_return": 0, "slots": [{"episode_return": r} for r in (2, 4, 20, None)]}]
    groups = plot.curves_by_label(records, ["lr=0.0001", "lr=0.0001", "lr=0.001", "lr=0.001"])
    assert list(groups) == ["lr=0.0001", "lr=0.001"]
    assert [c.values.tolist() for c in groups["lr=0.0001"]] == [[1, 2], [3, 4]]
    assert [c.values.tolist() for c in groups["lr=0.001"]] == [[10, 20]]  # slot 3 never finished an episode
    assert list(plot.curves_by_label(records, None)) == [""]  # no labels: one group of all four slots


def test_a_sweep_run_draws_one_line_per_swept_value_with_its_seeds_band(tmp_path):
    # lr=1e-4 seeds return 1, 3 then 2, 4: mean [2, 3], std [1, 1]. lr=1e-3 seeds: 10, 30 then 20, 40: mean [20, 30].
    run = _fake_run(tmp_path / "sweep", [[1, 3, 10, 30], [2, 4, 20, 40]])
    fig = plot.figure([run])
    try:
        ax = fig.axes[0]
        assert _legend(fig) == ["lr=0.0001 (mean ± 1 std of 2 seeds)", "lr=0.001 (mean ± 1 std of 2 seeds)"]
        assert [line.get_ydata().tolist() for line in ax.lines] == [[2, 3], [20, 30]]
        assert len(ax.collections) == 2  # a band per value
    finally:
        plt.close(fig)


def test_sweep_runs_of_two_seeds_pool_per_value_and_other_settings_stay_apart(tmp_path):
    a = _fake_run(tmp_path / "a", [[1, 3, 10, 30]], seed=0)
    b = _fake_run(tmp_path / "b", [[5, 7, 50, 70]], seed=1)  # same settings, another seed: same lines
    groups = plot.group_curves([a, b])
    assert {label: len(curves) for label, curves in groups.items()} == {"lr=0.0001": 4, "lr=0.001": 4}
    c = _fake_run(tmp_path / "c", [[1, 3, 10, 30]], ent_coef=0.1)
    assert list(plot.group_curves([a, c])) == ["ent_coef=0.01, lr=0.0001", "ent_coef=0.01, lr=0.001",
                                               "ent_coef=0.1, lr=0.0001", "ent_coef=0.1, lr=0.001"]


def test_a_seeds_only_run_is_one_line_and_a_single_run_has_no_std_in_its_legend(tmp_path):
    seeds = [{"slot": i, "seed_index": i} for i in range(3)]
    run = _fake_run(tmp_path / "seeds", [[1, 2, 3], [2, 3, 4]], slots=seeds)
    assert list(plot.group_curves([run])) == ["ppo on CartPole-v1"]
    single = tmp_path / "single"
    single.mkdir()
    (single / rundir.CONFIG).write_text(json.dumps({"format_version": RUN_FORMAT_VERSION, "agent": "ppo",
                                                    "run": {"env": "CartPole-v1"}, "num_devices": 1,
                                                    "config": {"seed": 0}}))
    (single / rundir.METRICS).write_text('{"env_steps": 10, "episode_return": 1}\n'
                                         '{"env_steps": 20, "episode_return": 2}\n')
    fig = plot.figure([str(single)])
    try:
        assert _legend(fig) == ["ppo on CartPole-v1"]
        assert "std" not in fig.axes[0].get_title() and not fig.axes[0].collections
    finally:
        plt.close(fig)


def test_slot_labels_name_the_swept_value_or_else_the_seed():
    assert slot_labels(SWEEP_SLOTS) == ["lr=0.0001", "lr=0.0001", "lr=0.001", "lr=0.001"]
    assert slot_labels([{"slot": 0, "seed_index": 0}, {"slot": 1, "seed_index": 1}]) == ["seed=0", "seed=1"]


def test_returns_per_label_are_weighted_by_episodes():
    # One label: (10 * 1 + 40 * 2) / 3 = 30. The other finished no episode: None.
    slots = [{"episode_return": 10.0, "episodes": 1}, {"episode_return": 40.0, "episodes": 2},
             {"episode_return": None, "episodes": 0}, {"episode_return": None, "episodes": 0}]
    labels = ["lr=0.0001", "lr=0.0001", "lr=0.001", "lr=0.001"]
    assert returns_by_label(slots, labels) == {"lr=0.0001": 30.0, "lr=0.001": None}


@pytest.mark.parametrize("live", [False, True])
def test_the_progress_line_of_a_sweep_shows_each_values_return(live):
    record = {"update": 2, "env_steps": 20, "time_s": 1.0, "sps": 20.0, "episode_return": 25.0, "loss/total": 0.1,
              "slots": [{"episode_return": r, "episodes": 1} for r in (20.0, 30.0, 40.0, 60.0)]}
    labels = slot_labels(SWEEP_SLOTS)
    assert "return lr=0.0001: 25.00  lr=0.001: 50.00  loss" in format_record(record, 4, labels)
    out = io.StringIO()
    with ProgressDisplay(num_updates=4, steps_per_update=10, stream=out, live=live, slot_labels=labels) as show:
        show(record)
    assert "lr=0.0001: 25.00  lr=0.001: 50.00" in out.getvalue()
