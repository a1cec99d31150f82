"""The benchmark harness (``benchmarks/common.py``): a row in a fresh process, rounds, ratios, where results go; and
every benchmark script answers ``--help``."""

import datetime
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
_spec = importlib.util.spec_from_file_location("benchmarks_harness_common", BENCHMARKS / "common.py")
common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)

SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if '__name__ == "__main__"' in p.read_text())


def test_a_row_in_a_fresh_process_comes_back_as_a_json_line_with_host_and_device_fields(tmp_path):
    row = tmp_path / "row.py"
    row.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(BENCHMARKS)!r})
        import jax
        import common
        common.emit(common.record("tiny", **common.platform_fields(jax.devices()), value=1), sys.argv[1])
    """))
    out = tmp_path / "tiny.jsonl"
    run = common.run_fresh([sys.executable, str(row), str(out)], env={"JAX_PLATFORMS": "cpu"}, cwd=tmp_path)
    (record,) = run.records
    assert record == json.loads(out.read_text())  # printed and appended alike
    assert record["benchmark"] == "tiny" and record["value"] == 1 and record["backend"] == "cpu"
    for field in ("cpu", "host_cpus", "load_avg_1m", "time_utc", "jax_version", "device_kind", "num_devices",
                  "command"):
        assert record[field] is not None, field
    assert record["cpu"] == common.cpu_description()
    assert run.wall_s > 0 and run.cpu_s > 0


def test_a_failed_row_raises_with_the_end_of_its_stderr(tmp_path):
    with pytest.raises(RuntimeError, match="exited 3:\n.*the reason"):
        common.run_fresh([sys.executable, "-c", "import sys; sys.stderr.write('the reason'); sys.exit(3)"])


def test_rounds_give_every_side_once_a_round_and_rotate_when_asked(capsys):
    assert list(common.interleave(2, ["a", "b", "c"])) == [(0, "a"), (0, "b"), (0, "c"), (1, "a"), (1, "b"),
                                                           (1, "c")]
    assert [s for _, s in common.interleave(3, ["a", "b", "c"], rotate=True)] == list("abc" "bca" "cab")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 15 and "row 1/6: round 1/2, a (" in err[0] and "row 9/9: round 3/3, b (" in err[-1]


def test_the_ratio_is_the_median_of_per_round_ratios_over_the_rounds_both_sides_ran():
    # rounds 0-2 of both sides: 2/1, 3/2, 8/4 -> 2.0, 1.5, 2.0; round 3 has one side only and does not count
    ratio = common.ratio({0: 2.0, 1: 3.0, 2: 8.0, 3: 5.0}, {0: 1.0, 1: 2.0, 2: 4.0})
    assert ratio == {"median": 2.0, "min": 1.5, "max": 2.0, "rounds": 3}
    assert common.ratio_text(ratio) == "2.00x (1.50-2.00, 3 rounds)"
    assert common.ratio({0: 1.0}, {1: 1.0}) is None and common.ratio_text(None) == "n/a"


def test_spread_and_steps_per_second():
    # 1..5: median 3, inclusive quartiles 2 and 4
    assert common.spread([5, 1, 4, 2, 3]) == {"median": 3, "q1": 2.0, "q3": 4.0, "min": 1, "max": 5, "n": 5}
    # 100 steps in 1 s and in 0.5 s: 100 and 200 steps/s
    stats = common.sps_stats(100, [1.0, 0.5])
    assert stats["sps_median"] == 150 and stats["sps_min"] == 100 and stats["sps_max"] == 200
    assert stats["repeats"] == 2


def test_results_go_to_a_folder_of_the_day_one_file_per_topic():
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    assert common.default_out("rollout") == f"benchmarks/results/{today}/rollout.jsonl"


def test_every_result_lies_in_a_dated_folder():
    stray = [p.name for p in (BENCHMARKS / "results").iterdir() if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", p.name)]
    assert stray == []


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_answers_help_without_measuring_anything(script, tmp_path):
    proc = subprocess.run([sys.executable, str(BENCHMARKS / script), "--help"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:") and list(tmp_path.iterdir()) == []


# A stand-in for rejax where none is installed: run as the peer's interpreter (``peers.py --inside rejax ARGS``), it
# prints the record rejax's side prints, config fields included, at 1M steps a second.
STAND_IN_PEER = """#!{python}
import json, sys
argv = sys.argv[sys.argv.index("--inside") + 2:]
flag = lambda name, default=None: argv[argv.index(name) + 1] if name in argv else default
steps = int(flag("--total-timesteps"))
print(json.dumps({{"peer": "rejax", "algo": flag("--algo"), "backend": "cpu", "num_devices": 1, "compile_s": 1.0,
                  "final_return": 9.0, "env_steps": steps, "train_s_median": steps / 1e6, "sps_median": 1e6,
                  "sps_min": 1e6, "sps_max": 1e6, "repeats": 1, "env": flag("--env"),
                  "num_envs": int(flag("--num-envs")), "num_steps": int(flag("--num-steps", 128)),
                  "total_timesteps": steps}}))
"""


@pytest.mark.slow
def test_train_vs_peer_quick_runs_rlpar_with_the_peers_sampling_beside_its_own_and_a_peer_row(tmp_path):
    out, peer = tmp_path / "train.jsonl", tmp_path / "rejax-stand-in"
    peer.write_text(STAND_IN_PEER.format(python=sys.executable))
    peer.chmod(0o755)
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "train_vs_peer.py"), "--agents", "ppo", "--devices", "1",
                           "--rounds", "1", "--quick", "--peers", "rejax", "--layouts", "single,default", "--out",
                           str(out)], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO), "REJAX_PYTHON": str(peer)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = {(r["program"], r.get("layout")): r for r in map(json.loads, out.read_text().splitlines())}
    assert set(records) == {("rlpar", "single"), ("rlpar", "default"), ("rejax", None)}
    single, default, rejax = records["rlpar", "single"], records["rlpar", "default"], records["rejax", None]
    assert single["command"].startswith("python -m rlpar.train ppo --env CartPole-v1")
    assert "--shuffle-block 1" in single["command"] and "--shuffle-block" not in default["command"]
    assert single["sampling"] == "single rows" and single["sps"] > 0 and single["compile_s"] > 0 and single["cpu"]
    assert rejax["env"] == "CartPole-v1" and rejax["sps"] == 1e6 and rejax["case"] == "ppo"
    line = next(line for line in proc.stdout.splitlines() if line.startswith("ppo: train SPS"))
    assert "rlpar 1 dev single rows" in line and "rlpar 1 dev default layout" in line
    ratio = single["sps"] / 1e6  # one round: the median of one per-round ratio
    assert f"rlpar / rejax {ratio:.2f}x" in line, line


@pytest.mark.slow
def test_layout_learning_trains_both_layouts_of_a_case_on_the_same_steps_and_compares_them(tmp_path):
    out = tmp_path / "layouts.jsonl"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "layout_learning.py"), "--quick", "--cases",
                           "cartpole-4096", "--seeds", "2", "--eval-episodes", "4", "--out", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows, blocks = map(json.loads, out.read_text().splitlines())
    assert (rows["layout"], rows["shuffle_block"], blocks["layout"]) == ("rows", 1, "blocks")
    assert blocks["shuffle_block"] == 8  # 64 envs, 4 minibatches of 2048 rows: 256 blocks of 8 each
    assert rows["config"]["shuffle_block"] == 1 and blocks["config"]["shuffle_block"] == 8
    for row in (rows, blocks):
        assert [steps for steps, _ in row["greedy_curve"]] == [64 * 128 * 2, 64 * 128 * 4]
        assert len(row["final_greedy"]) == 2 and row["final_ci95"][0] <= row["final_mean"] <= row["final_ci95"][1]
    assert rows["final_greedy"] != blocks["final_greedy"]  # another sampling, another run
    assert "cartpole-4096: blocks - rows = " in proc.stdout and "(Welch 95%)" in proc.stdout
    bad = subprocess.run([sys.executable, str(BENCHMARKS / "layout_learning.py"), "--cases", "pong"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "'pong': expected cases from" in bad.stderr


def test_force_takes_the_platforms_choices_and_refuses_others_in_one_line():
    assert common.parse_forcing(["collector_unroll=8", "raveled_update=on", "fast_paths=off", "shuffle_method=sort"]) \
        == {"collector_unroll": 8, "raveled_update": True, "fast_paths": False, "shuffle_method": "sort"}
    for item, message in (("bogus=1", "CHOICE one of fast_paths"), ("collector_unroll", "expected CHOICE=VALUE"),
                          ("collector_unroll=x", "collector_unroll='x': unroll 'x'"),
                          ("fast_paths=maybe", "expected on or off"), ("raveled_update=7", "expected True, False")):
        with pytest.raises(ValueError, match=re.escape(message)):
            common.parse_forcing([item])


def test_apply_forcing_answers_as_asked_and_a_later_row_starts_clean():
    from rlpar.core import platform

    try:
        common.apply_forcing({"collector_unroll": 8, "fast_paths": False})
        assert platform.collector_unroll() == 8 and not platform.cpu_fast_paths()
        common.apply_forcing({"raveled_update": True})  # the next row: only what it asks
        assert platform.collector_unroll() == 1 and platform.cpu_fast_paths() and platform.raveled_update("tpu")
    finally:
        common.apply_forcing({})
    assert all(platform.forced_answer(choice) is None for choice in platform.CHOICES) and platform.forced() is None


def test_a_code_tree_goes_first_on_pythonpath_and_the_machines_entries_stay(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/opt/jax-site", "", "/tmp/site"]))
    assert common.pythonpath_first("/work/tree") == os.pathsep.join(["/work/tree", "/opt/jax-site", "/tmp/site"])
    monkeypatch.delenv("PYTHONPATH")
    assert common.pythonpath_first(Path("/work/tree")) == "/work/tree"


@pytest.mark.slow  # trains and evaluates in fresh processes (about 18 s); CI runs it (-m slow)
def test_cold_start_times_a_run_line_by_line_and_scores_its_policy(tmp_path):
    out = tmp_path / "cold.jsonl"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "cold_start.py"), "--no-probe", "--no-warm",
                           "--variant", "RLPAR_PLAIN_LAYERS=maybe", "--run-dir-root", "runs", "--evaluate", "2",
                           "--out", str(out), "--",
                           "ppo", "--env", "CartPole-v1", "--total-timesteps", "2048", "--eval-every", "0"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), "/nonexistent"])})
    # the variant's value reaches the run, which refuses it: recorded as not measured, the exit status 1
    assert proc.returncode == 1, proc.stderr[-3000:]
    record, refused = [json.loads(line) for line in out.read_text().splitlines()]
    assert refused["variant"] == "RLPAR_PLAIN_LAYERS=maybe" and "RLPAR_PLAIN_LAYERS='maybe'" in refused["not_measured"]
    assert record["mode"] == "cold" and record["seed"] == 0 and record["code"] == str(REPO)
    assert record["variant"] == "" and "wall_s" not in refused
    # the lines arrive in order, inside the process's wall time; the CLI's own figures are read back
    assert 0 < record["header_s"] <= record["compiled_line_s"] <= record["done_line_s"] < record["wall_s"]
    assert record["compile_s"] > 0 and record["sps"] > 0 and record["to_first_update_s"] > 0
    assert record["after_done_s"] == pytest.approx(record["wall_s"] - record["done_line_s"], abs=1e-3)
    assert record["greedy_return"] is not None and record["greedy_return"] > 0  # CartPole: every episode scores
    assert (tmp_path / "runs" / f"r0-cold-seed0-{REPO.name}" / "config.json").exists()


def test_cold_start_variants_take_shell_quoting():
    spec = importlib.util.spec_from_file_location("benchmarks_cold_start", BENCHMARKS / "cold_start.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert module.parse_variant('XLA_FLAGS="--a=1 --b=2" B=3 C=') == {"XLA_FLAGS": "--a=1 --b=2", "B": "3", "C": ""}


@pytest.mark.parametrize("text", ["", "TPU", "1X=2", "A=1 B", "A=1 A=2", "PYTHONPATH=/x", 'A="open'])
def test_cold_start_refuses_a_malformed_variant_in_one_line(text):
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "cold_start.py"), "--variant", text, "--", "ppo"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--variant" in proc.stderr, proc.stderr


def test_bf16_operands_rounds_dense_operands_as_a_tpu_default_matmul(monkeypatch):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import agents.layers as layers

    monkeypatch.setattr(layers, "promote_dtype", layers.promote_dtype)  # undone after the test
    spec = importlib.util.spec_from_file_location("benchmarks_bf16_operands", BENCHMARKS / "bf16_operands.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec.loader.exec_module(module)
    x = jnp.linspace(-1.0, 1.0, 3 * 5).reshape(3, 5) + 1e-3  # values bfloat16 cannot hold exactly
    dense = layers.Dense(4, fast=False)
    params = dense.init(jax.random.key(0), x)
    exact = dense.apply(params, x)
    module.install()
    module.install()  # once is enough: a second call does not round twice over
    kernel = params["params"]["kernel"]
    by_hand = (np.asarray(x.astype(jnp.bfloat16), np.float32) @ np.asarray(kernel.astype(jnp.bfloat16), np.float32)
               + np.asarray(params["params"]["bias"]))
    rounded = dense.apply(params, x)
    np.testing.assert_allclose(rounded, by_hand, rtol=1e-6, atol=1e-6)
    assert float(jnp.abs(rounded - exact).max()) > 1e-5


def _thunks():
    spec = importlib.util.spec_from_file_location("benchmarks_harness_thunks", BENCHMARKS / "thunks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kernel_events_reads_the_cpus_threads_and_an_accelerators_ops_by_name():
    from types import SimpleNamespace as NS

    event = lambda name, ns: NS(name=name, duration_ns=ns)  # noqa: E731
    data = NS(planes=[
        NS(name="/host:CPU", lines=[NS(name="tf_XLAEigen/1", events=[event("copy.51", 7), event("while.3", 99)]),
                                    NS(name="python", events=[event("PjitFunction(f)", 1000)])]),
        NS(name="/device:TPU:0", lines=[
            NS(name="XLA Ops", events=[event("%fusion.12 = f32[8]{0} fusion(f32[8]{0} %p), kind=kLoop", 3),
                                       event("%while.118 = (s32[]) while(...)", 500),
                                       event("%conditional.4 = (f32[]) conditional(...)", 40)]),
            NS(name="XLA Modules", events=[event("jit_update(123)", 600)])]),
    ])
    thunks = _thunks()
    assert list(thunks.kernel_events(data)) == [("copy.51", 7), ("fusion.12", 3)]
    assert list(thunks.kernel_events(data, loops=True, devices_only=True)) == [
        ("fusion.12", 3), ("while.118", 500), ("conditional.4", 40)]


@pytest.mark.slow  # moved out of the default run for its length; CI runs the slow set too
def test_collector_parts_times_the_engine_beside_the_bare_loop_with_the_network_asked_for(tmp_path):
    out = tmp_path / "parts.jsonl"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "collector_parts.py"), "--env", "Breakout-MinAtar",
                           "--num-envs", "1", "--num-steps", "8", "--hidden-sizes", "16", "--torso", "mlp",
                           "--activation", "relu", "--repeats", "1", "--min-repeat-s", "0", "--calls", "1",
                           "--only", "engine, unroll 2", "--out", str(out)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = {r["program"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(records) == {"engine, unroll 2", "bare"}
    assert all(r["torso"] == "mlp" and r["activation"] == "relu" and r["hidden_sizes"] == [16] and r["sps_median"] > 0
               for r in records.values())
    assert records["bare"]["vs_bare"] == 0.0


def test_trace_ops_sums_loops_and_groups_kernels_by_runs_per_update(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # its own folder, where it imports thunks from
    spec = importlib.util.spec_from_file_location("benchmarks_harness_trace_ops", BENCHMARKS / "trace_ops.py")
    trace_ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trace_ops)
    ops = {"while.1": (900.0, 1.0), "while.2": (50.0, 4.0), "fusion.3": (256.0, 128.0), "copy.4": (128.0, 128.0),
           "fusion.5": (10.0, 1.0), "conditional.6": (5.0, 128.0)}
    found = trace_ops.summary(ops)
    assert [loop["op"] for loop in found["loops"]] == ["while.1", "while.2"]
    assert found["classes"] == [{"runs_per_update": 1.0, "kernels": 1, "us": 10.0},
                                {"runs_per_update": 128.0, "kernels": 2, "us": 384.0}]


def test_profile_update_refuses_dump_without_kernels_before_measuring(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "profile_update.py"), "--dump", "d"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2 and "--dump writes the kernels' trace: give --kernels with it" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_chunk_overhead_refuses_an_unknown_program_before_building_anything(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "chunk_overhead.py"), "--only", "the chunk"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "--only 'the chunk': expected some of bare jit + scan(update);" in proc.stderr


# One program of each way the script builds one (the others differ from these by a flag): the bare scan, the chunk
# under jax.jit, the runner's step under jax.pmap, and the runner's compiled step, donated, its metrics read.
CHUNK_PROGRAMS = ("bare jit + scan(update)", "jit chunk program, evaluation branch",
                  "the runner's chunk program under jax.pmap", "the same, metrics read at once (jax.device_get)")


@pytest.mark.slow
def test_chunk_overhead_times_each_kind_of_program_at_one_env(tmp_path):
    out = tmp_path / "chunks.jsonl"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "chunk_overhead.py"), "--env", "CartPole-v1",
                           "--num-envs", "1", "--num-steps", "16", "--collector-unroll", "2", "--updates", "2",
                           "--repeats", "1", "--only", ";".join(CHUNK_PROGRAMS), "--out", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["program"] for r in records] == list(CHUNK_PROGRAMS)
    assert all(r["num_envs"] == 1 and r["num_steps"] == 16 and r["collector_unroll"] == 2 and r["ms_per_update"] > 0
               and isinstance(r["platform_evaluation_in_chunk"], bool) and isinstance(r["runner_donates"], bool)
               for r in records)


def test_shuffle_paths_reads_each_method_spec_and_refuses_a_bad_one(monkeypatch):
    spec = importlib.util.spec_from_file_location("benchmarks_shuffle_paths", BENCHMARKS / "shuffle_paths.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec.loader.exec_module(module)
    assert module._parts("sort/64/blocks+packed") == ("sort", "64", "blocks", True)
    assert module._parts("feistel/1/packed") == ("feistel", "1", "", True)
    assert module._parts("sort//shaped") == ("sort", "", "shaped", False)
    assert module._parts("sort") == ("sort", "", "", False)
    for good in ("none", "feistel", "sort/8", "sort/1/packed", "sort/64/blocks+packed", "sort//shaped"):
        assert module._valid(good), good
    for bad in ("bogus", "sort/0", "sort/x", "sort/1/tiles", "sort/1/flat+tight", "sort/1/flat+packed+packed"):
        assert not module._valid(bad), bad
