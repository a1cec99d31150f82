"""benchmarks/memory_fit.py (doubling, then halving to the largest env count that fits), benchmarks/preset_search.py's
slot grid, benchmarks/slot_parity.py's parts, and benchmarks/marl_vs_jaxmarl.py end to end on a stand-in for JaxMARL's
script, and its refusal of a path that is not that script."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import preset_search  # noqa: E402
import slot_parity  # noqa: E402


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True,
                          timeout=600, env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"})


@pytest.mark.slow  # compiles an update per env count (about 40 s); CI runs it (-m slow)
def test_memory_fit_doubles_then_halves_to_the_largest_count_under_the_limit(tmp_path):
    out = tmp_path / "fit.jsonl"
    # 16 envs x 8 steps of CartPole's update take well under a MiB of temporaries, 1024 well over 2 MiB
    done = _run("memory_fit.py", "--env", "CartPole-v1", "--num-steps", "8", "--start", "16", "--stop", "4096",
                "--memory-gib", str(2 / 1024), "--resolution", "0.25", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    rows, summary = records[:-1], records[-1]
    sizes = [r["num_envs"] for r in rows]
    doubling = [n for n in sizes if n & (n - 1) == 0]
    assert doubling[:2] == [16, 32] and all(b == 2 * a for a, b in zip(doubling, doubling[1:]))
    fits = {r["num_envs"]: r["fits"] for r in rows}
    assert all(r["total_bytes"] <= 2 * 2 ** 20 for r in rows if r["fits"])
    assert all(r["total_bytes"] > 2 * 2 ** 20 for r in rows if not r["fits"])
    largest, miss = summary["largest_fit"], summary["first_miss"]
    assert fits[largest] and not fits[miss] and largest < miss <= 1.25 * largest
    assert not any(ok and n > largest for n, ok in fits.items())
    # temporaries grow with the envs, at most linearly: each doubling adds some, and never more than doubles them
    # (not exactly linearly: XLA's buffer assignment reuses a buffer at some sizes, which differ by host and JAX)
    temp = {r["num_envs"]: r["temp_mib"] for r in rows}
    assert all(temp[n] < temp[2 * n] <= 2 * temp[n] + 0.01 for n in doubling[:-1]), temp  # MiB in two decimals


def test_preset_search_slots_follow_the_sweep_grid_first_field_slowest():
    grid = preset_search.sweep_grid("lr=1e-3,2e-3 ent_coef=0,0.01")
    assert grid == [{"lr": 1e-3, "ent_coef": 0.0}, {"lr": 1e-3, "ent_coef": 0.01}, {"lr": 2e-3, "ent_coef": 0.0},
                    {"lr": 2e-3, "ent_coef": 0.01}]
    assert preset_search.sweep_grid("") == [{}]
    assert preset_search.parse_shape("1024x16x8x4") == dict(num_envs=1024, num_steps=16, num_minibatches=8,
                                                            update_epochs=4)
    with pytest.raises(Exception, match="ENVSxSTEPSxMINIBATCHESxEPOCHS"):
        preset_search.parse_shape("1024x16")


def test_preset_search_set_gives_each_field_its_own_type():
    from agents.ppo import PPOConfig

    config = PPOConfig()
    assert preset_search.parse_set("lr=1e-3 anneal_lr=false update_epochs=2 torso=mlp hidden_sizes=256,128",
                                   config) == dict(lr=1e-3, anneal_lr=False, update_epochs=2, torso="mlp",
                                                   hidden_sizes=(256, 128))
    assert preset_search.parse_set("", config) == {}
    for bad, says in [("batch_size=5", "a field of PPOConfig"), ("seed=3", "other than seed (--seed)"),
                      ("anneal_lr=flase", "'flase' is not a bool")]:
        with pytest.raises(ValueError, match=re.escape(says)):
            preset_search.parse_set(bad, config)


@pytest.mark.slow  # compiles five parts three ways (about 40 s of CPU)
def test_slot_parity_finds_a_slot_computing_what_the_single_program_does_on_the_cpu(tmp_path):
    out = tmp_path / "parity.jsonl"
    done = _run("slot_parity.py", "--env", "CartPole-v1", "--num-envs", "8", "--warm-updates", "2", "--copies", "2",
                "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {r["part"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert list(rows) == ["shuffles", "grad", "optimizer", "fit", "collect", "update"]
    for part, row in rows.items():
        gap = row["vmap2_slot0_vs_single"]
        assert gap["other_elements_differing"] == 0, part  # the same permutations, actions, counters
        assert gap["max_abs"] < 1e-4, (part, gap)  # float rounding, not another computation
        assert row["cpu_vs_single"]["max_abs"] == 0.0  # the reference is this backend here
    assert rows["fit"]["first_step_apart"] == {"cpu": None, "vmap2": None}  # no minibatch step strays


def test_slot_parity_measures_name_the_leaf_and_the_step_where_two_runs_part():
    import numpy as np

    a = {"n": np.array([3, 4], np.int32), "w": np.array([1.0, 2.0])}
    b = {"n": np.array([3, 5], np.int32), "w": np.array([1.0, 2.5])}
    gap = slot_parity.difference(a, b)
    assert (gap["max_abs"], gap["max_rel"], gap["worst_leaf"], gap["other_elements_differing"]) == (0.5, 0.25, "['w']", 1)
    assert slot_parity.difference(a, a)["max_abs"] == 0.0 and slot_parity.difference(a, a)["worst_leaf"] == ""

    # per-step statistics [epochs, minibatches]: a KL near zero at the first step is held to its scale over the steps
    kl = np.array([[1e-9, 0.01, 0.02, 0.01], [0.01, 0.02, 0.01, 0.02]])
    loss = np.linspace(1.0, 2.0, 8).reshape(2, 4)
    same = {"kl": kl, "loss": loss}
    assert slot_parity.first_step_apart(same, {"kl": kl + 1e-8, "loss": loss}) is None
    late = loss.copy()
    late[1, 2] += 0.1  # epoch 1, minibatch 2: step 6 in epoch-major order
    assert slot_parity.first_step_apart(same, {"kl": kl, "loss": late}) == 6
    assert slot_parity.first_step_apart({}, {}) is None


def test_marl_vs_jaxmarl_refuses_a_path_that_is_not_jaxmarl_s_script(tmp_path):
    stray = tmp_path / "ippo_ff_mpe.py"
    stray.write_text("")
    done = _run("marl_vs_jaxmarl.py", "--jaxmarl-script", str(stray))
    assert done.returncode == 2
    assert "expected JaxMARL's baselines/IPPO/ippo_ff_mpe.py" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


# A stand-in for JaxMARL's baselines/IPPO/ippo_ff_mpe.py where no checkout is at hand: its make_train's shape (the
# config's NUM_UPDATES set, metrics per update, a logging io_callback each update that must not run here).
STAND_IN_JAXMARL = """
import jax
import jax.numpy as jnp
import wandb


def make_train(config):
    config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]

    def train(rng):
        def update(carry, _):
            def callback(metric):
                raise RuntimeError("the logging callback ran")
            metric = {"returned_episode_returns": jnp.full((config["NUM_STEPS"], config["NUM_ENVS"]), carry)}
            jax.experimental.io_callback(callback, None, metric)
            return carry + 1.0, metric
        _, metrics = jax.lax.scan(update, jax.random.uniform(rng), None, config["NUM_UPDATES"])
        return {"metrics": metrics}
    return train
"""


@pytest.mark.slow  # trains IPPO for two updates on each rlpar side (about a minute); CI runs it (-m slow)
def test_marl_vs_jaxmarl_runs_rlpar_with_single_rows_beside_its_layout_and_jaxmarl_without_its_callback(tmp_path):
    pytest.importorskip("jaxmarl", reason="needs the marl extra: pip install -e \".[marl]\"")
    script = tmp_path / "IPPO" / "ippo_ff_mpe.py"
    (script.parent / "config").mkdir(parents=True)
    script.write_text(STAND_IN_JAXMARL)
    (script.parent / "config" / "ippo_ff_mpe.yaml").write_text(
        "NUM_ENVS: 16\nNUM_STEPS: 128\nTOTAL_TIMESTEPS: 1\nPROJECT: x\nWANDB_MODE: disabled\n")
    out = tmp_path / "marl.jsonl"
    done = _run("marl_vs_jaxmarl.py", "--jaxmarl-script", str(script), "--num-envs", "8", "--total-timesteps",
                str(8 * 128 * 2), "--rounds", "1", "--sides", "rlpar,rlpar-default,jaxmarl", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    records = {r["program"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(records) == {"rlpar", "rlpar-default", "jaxmarl"}
    assert records["rlpar"]["shuffle_block"] == 1 and records["rlpar"]["sampling"] == "single rows"
    assert records["rlpar-default"]["shuffle_block"] == 0
    assert records["jaxmarl"]["logging_callback"] is False and records["jaxmarl"]["env_steps"] == 8 * 128 * 2
    assert all(r["sps"] > 0 and r["round"] == 0 for r in records.values())  # rounds count from 0
    assert "rlpar / jaxmarl SPS, both single rows: " in done.stdout
    assert "rlpar's default layout / jaxmarl SPS (not like for like): " in done.stdout


@pytest.mark.parametrize("script, args, says", [
    ("memory_fit.py", ["--agent", "nope"], "unknown agent 'nope'"),
    ("memory_fit.py", ["--env", "NoSuchEnv-v0"], "unknown env 'NoSuchEnv-v0'"),
    ("preset_search.py", ["--shapes", "8x8"], "expected ENVSxSTEPSxMINIBATCHESxEPOCHS"),
    ("preset_search.py", ["--shapes", "8x8x3x1"], "num_minibatches=3"),
    ("preset_search.py", ["--shapes", "8x8x1x1", "--set", "lr=fast"], "--set 'lr=fast': 'fast' is not a float"),
    ("preset_search.py", ["--shapes", "8x8x1x1", "--set", "learning_rate=1"], "a field of PPOConfig"),
    ("slot_parity.py", ["--copies", "0"], "--copies '0': expected a comma list of positive integers"),
    ("slot_parity.py", ["--env", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything_compiles(script, args, says):
    done = _run(script, *args)
    assert done.returncode == 2 and says in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
