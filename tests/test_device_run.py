"""``benchmarks/device_run.sh`` and what it is made of: the choice of Python, a ``PYTHONPATH`` appended to rather
than replaced (the TPU machine's JAX lives in a folder it names), packages from wheels or else an index, the time
guard, and ``--quick`` end to end on the CPU.

The shell script's tests run it with a stand-in Python: a wrapper that hands every command to this interpreter
except ``benchmarks/device_run.py``, whose environment it writes down instead of running the rows. Fake wheels (a
module each, the real names and versions) stand for rejax's group, and an index is a folder of ``index.html``
files; nothing is fetched from the network.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"


def _load(name: str):
    """A benchmarks/ module under a name of its own; its sibling imports (common, peers) are found while it loads
    and then taken out of ``sys.modules`` again, so no other test sees them under those plain names."""
    before = set(sys.modules)
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
        for added in set(sys.modules) - before:
            if added in ("common", "peers", "train_vs_peer"):
                del sys.modules[added]
    return module


packages = _load("device_packages")
device_run = _load("device_run")


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------------------------
# The package groups


def test_carried_groups_pin_every_package_and_the_machine_group_takes_what_its_index_has():
    groups = {group: packages.requirements(group) for group in packages.GROUPS}
    for group in ("shared", "rlpar", "rejax"):
        assert groups[group] and all(version for _, version in groups[group]), group
    for group in ("machine", "checkpoint"):  # whatever version the machine's index holds
        assert groups[group] and all(version is None for _, version in groups[group]), group
    names = [packages.normalize(name) for group in groups.values() for name, _ in group]
    assert sorted({name for name in names if names.count(name) > 1}) == ["gymnax"]  # rlpar's and rejax's
    assert dict(groups["rlpar"])["gymnax"].startswith("1.") and dict(groups["rejax"])["gymnax"].startswith("0.")
    # What the machine has must never come from the wheels: a second JAX or numpy would shadow its own.
    assert not {"jax", "jaxlib", "numpy", "scipy", "ml-dtypes", "libtpu"} & set(names)


def test_a_list_line_is_a_name_or_a_pin(tmp_path):
    (tmp_path / "g.txt").write_text("# comment\nFoo_Bar==1.2.post3   # why\n\nbaz\n")
    assert packages.requirements("g", tmp_path) == [("Foo_Bar", "1.2.post3"), ("baz", None)]
    (tmp_path / "bad.txt").write_text("foo>=1\n")
    with pytest.raises(ValueError, match="name==version"):
        packages.requirements("bad", tmp_path)


def test_missing_names_what_is_absent_or_at_another_version(tmp_path):
    pytest_version = packages.metadata.version("pytest")
    (tmp_path / "g.txt").write_text(f"pytest=={pytest_version}\nPyTest==0.0.1\nno-such-dist-for-rlpar\npip\n")
    assert packages.missing("g", tmp_path) == [f"PyTest==0.0.1 (found {pytest_version})", "no-such-dist-for-rlpar"]


def test_wheels_cover_a_group_by_file_name(tmp_path):
    (tmp_path / "g.txt").write_text("typing-extensions==4.16.0\ndm-tree==0.1.10\nmatplotlib\n")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "typing_extensions-4.16.0-py3-none-any.whl").touch()
    (wheels / "dm_tree-0.1.9-cp311-cp311-manylinux_2_28_x86_64.whl").touch()  # another version
    assert packages.lacking_wheels(wheels, "g", tmp_path) == ["dm-tree==0.1.10", "matplotlib"]
    (wheels / "Matplotlib-3.0-cp311-cp311-manylinux2014_x86_64.whl").touch()  # any version of a bare name
    (wheels / "dm_tree-0.1.10-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    assert packages.lacking_wheels(wheels, "g", tmp_path) == []
    assert packages.lacking_wheels(tmp_path / "absent", "g", tmp_path) == ["typing-extensions==4.16.0",
                                                                          "dm-tree==0.1.10", "matplotlib"]


# ---------------------------------------------------------------------------------------------------------------
# device_run.sh with a stand-in Python


def _fake_wheel(folder: Path, name: str, version: str) -> None:
    """A wheel holding one empty module named after the distribution (``dm-tree`` -> ``dm_tree``)."""
    dist = packages.normalize(name).replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {f"{dist}/__init__.py": "",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / f"{dist}-{version}-py3-none-any.whl", "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)


def _rejax_wheels(folder: Path) -> Path:
    """Fake wheels for rejax's group: rejax, gymnax 0.0.9 and the rest import as empty modules."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, version in packages.requirements("rejax"):
        _fake_wheel(folder, name, version)
    return folder


def _index(folder: Path, wheels: Path) -> str:
    """A simple index (PEP 503) in ``folder`` serving ``wheels``; its ``file://`` URL."""
    for wheel in wheels.glob("*.whl"):
        project = folder / packages.normalize(wheel.name.split("-")[0])
        project.mkdir(parents=True, exist_ok=True)
        (project / "index.html").write_text(f'<a href="{wheel.resolve().as_uri()}">{wheel.name}</a>\n')
    folder.mkdir(parents=True, exist_ok=True)
    return folder.resolve().as_uri()


def _stand_in(path: Path, log: Path) -> Path:
    """An executable that runs this interpreter, except for ``benchmarks/device_run.py``: for that it writes the
    environment the rows would run in to ``log`` (JSON) and exits 0."""
    path.parent.mkdir(parents=True, exist_ok=True)
    record = path.with_name(path.name + "_record.py")
    record.write_text("import json, os, sys\n"
                      "seen = {k: os.environ.get(k) for k in ('PYTHONPATH', 'REJAX_PYTHON', 'REJAX_SITE', "
                      "'DEVICE_RUN_STARTED')}\n"
                      f"json.dump(dict(python=sys.argv[1], args=sys.argv[2:], **seen), open({str(log)!r}, 'w'))\n")
    path.write_text("#!/usr/bin/env bash\n"
                    "export DEVICE_RUN_STAND_IN=1\n"  # how a command tells that it ran under this Python
                    f'[[ ${{1:-}} == benchmarks/device_run.py ]] && exec {sys.executable} {record} "$0" "${{@:2}}"\n'
                    f'exec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return path


def _run_sh(tmp_path: Path, *args: str, root: Path = REPO, **env: str) -> tuple[subprocess.CompletedProcess, dict]:
    """``bash benchmarks/device_run.sh ARGS`` from a folder of its own, no network (an empty index unless ``env``
    names one), packages installed under ``tmp_path``; its result and the stand-in's log (empty if not reached)."""
    log = tmp_path / "device_run_env.json"
    log.unlink(missing_ok=True)
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "REJAX_PYTHON", "REJAX_SITE", "INDEX_URL")}
    base.update(PYTHON=str(_stand_in(tmp_path / "bin" / "python", log)), WHEELS=str(tmp_path / "no-wheels"),
                DEVICE_SITE=str(tmp_path / "site"), INDEX_URL=_index(tmp_path / "empty-index", tmp_path / "none"),
                PYTHONPATH=str(tmp_path / "machine"))
    base.update(env)
    base = {k: v for k, v in base.items() if v is not None}
    work = tmp_path / "elsewhere"
    work.mkdir(exist_ok=True)
    proc = subprocess.run(["bash", str(root / "benchmarks" / "device_run.sh"), *args], cwd=work, env=base,
                          capture_output=True, text=True, timeout=300)
    return proc, (json.loads(log.read_text()) if log.exists() else {})


@pytest.mark.slow  # a benchmark harness's install paths in subprocesses (about 20 s); CI runs it (-m slow)
def test_pythonpath_is_appended_to_and_rejax_installed_from_the_wheels_apart(tmp_path):
    wheels = _rejax_wheels(tmp_path / "wheels")
    proc, seen = _run_sh(tmp_path, "--quick", "--out", str(tmp_path / "out"), WHEELS=str(wheels))
    assert proc.returncode == 0, proc.stderr[-3000:]
    machine, rejax_site = str(tmp_path / "machine"), str(tmp_path / "site" / f"python{sys.version_info[0]}."
                                                              f"{sys.version_info[1]}" / "rejax")
    assert seen["PYTHONPATH"].split(":")[:2] == [machine, str(REPO)]  # the machine's folder kept, first
    assert seen["REJAX_SITE"].split(":")[:2] == [rejax_site, machine]  # rejax's gymnax before anything else
    assert seen["REJAX_PYTHON"] == seen["python"] and seen["args"] == ["--quick", "--out", str(tmp_path / "out")]
    assert f"rejax: installed from the wheels in {wheels}" in proc.stderr
    assert (Path(rejax_site) / "gymnax-0.0.9.dist-info").is_dir()
    assert list((Path(rejax_site) / "rejax").glob("__pycache__/*.pyc"))  # with bytecode, as pip installs by default
    assert abs(int(seen["DEVICE_RUN_STARTED"]) - time.time()) < 300  # the budget counts from the script's start

    proc, _ = _run_sh(tmp_path, WHEELS=str(wheels))  # installed once: the second run finds it in place
    assert proc.returncode == 0 and "installed from" not in proc.stderr, proc.stderr[-3000:]
    # A folder stamped with its list alone was installed before bytecode: installed again
    (Path(rejax_site) / ".installed").write_text((packages.REQUIREMENTS / "rejax.txt").read_text())
    proc, _ = _run_sh(tmp_path, WHEELS=str(wheels))
    assert proc.returncode == 0 and "rejax: installed from the wheels" in proc.stderr, proc.stderr[-3000:]


def test_shell_runs_a_command_of_its_own_after_the_same_installs(tmp_path):
    code = "import os, sys; print('SEEN', sys.argv[1], os.environ['PYTHONPATH'], os.environ.get('DEVICE_RUN_STAND_IN'))"
    proc, seen = _run_sh(tmp_path, "--offline", "--shell", f'python -c "{code}" "$PWD"')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert seen == {}  # the rows' script was not run
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("SEEN")]
    _, cwd, pythonpath, stand_in = line.split()
    assert cwd == str(REPO) and stand_in == "1"  # in the checkout, as the rows run; `python` is $PYTHON
    assert pythonpath.split(":")[:2] == [str(tmp_path / "machine"), str(REPO)]


@pytest.mark.parametrize("args, says", [
    (["--shell", ""], "--shell needs a command as one argument"),
    (["--shell", "--offline"], "--shell needs a command as one argument"),
    (["--shell", "true", "--shell", "true"], "--shell given twice"),
    (["--shell", "python", "-c", "print(1)"], "-c: with --shell only --offline is taken"),
    (["--quick", "--shell", "true"], "--quick: with --shell only --offline is taken"),
])
def test_shell_refuses_what_it_would_drop_in_one_line(tmp_path, args, says):
    proc, seen = _run_sh(tmp_path, *args)
    assert proc.returncode == 2 and says in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert seen == {}


def test_a_python_named_python_is_called_by_its_path(tmp_path):
    # PYTHON=python: the command's `python` is a wrapper that must not call itself
    folder = tmp_path / "pybin"
    folder.mkdir()
    (folder / "python").write_text(f'#!/usr/bin/env bash\nexec {sys.executable} "$@"\n')
    (folder / "python").chmod(0o755)
    proc, _ = _run_sh(tmp_path, "--offline", "--shell", "python -c 'print(\"RAN\")'", PYTHON="python",
                      PATH=f"{folder}{os.pathsep}{os.environ['PATH']}")
    assert proc.returncode == 0 and "RAN" in proc.stdout, proc.stderr[-3000:]
    proc, _ = _run_sh(tmp_path, "--offline", "--shell", "true", PYTHON="no-such-python")
    assert proc.returncode == 1 and "PYTHON=no-such-python: no such program" in proc.stderr


@pytest.mark.slow  # a benchmark harness's install paths in subprocesses (about 20 s); CI runs it (-m slow)
def test_without_wheels_rejax_comes_from_the_index_and_with_offline_not_at_all(tmp_path):
    index = _index(tmp_path / "index", _rejax_wheels(tmp_path / "served"))
    proc, seen = _run_sh(tmp_path, INDEX_URL=index)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"rejax: installed from the index {index}" in proc.stderr and "rejax" in seen["REJAX_SITE"]

    proc, seen = _run_sh(tmp_path, "--offline", INDEX_URL=index, DEVICE_SITE=str(tmp_path / "fresh-site"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--offline: not installed" in proc.stderr and "rejax's rows are skipped" in proc.stderr
    assert seen["REJAX_SITE"] is None and seen["PYTHONPATH"].startswith(str(tmp_path / "machine") + ":")


def _tree(tmp_path: Path) -> Path:
    """A checkout of its own: the run's scripts copied, the packages linked (so a .venv can be made in it)."""
    root = tmp_path / "checkout"
    (root / "benchmarks").mkdir(parents=True)
    for name in ("device_run.sh", "device_packages.py"):
        shutil.copy(BENCHMARKS / name, root / "benchmarks" / name)
    shutil.copytree(BENCHMARKS / "device_requirements", root / "benchmarks" / "device_requirements")
    for package in ("rlpar", "agents", "envs"):
        (root / package).symlink_to(REPO / package)
    return root


@pytest.mark.slow  # a benchmark harness's install paths in subprocesses (about 20 s); CI runs it (-m slow)
def test_the_python_is_PYTHON_else_the_checkouts_venv_else_python3(tmp_path):
    root = _tree(tmp_path)
    venv_log = tmp_path / "venv.json"
    _stand_in(root / ".venv" / "bin" / "python", venv_log)
    proc, seen = _run_sh(tmp_path, root=root)  # PYTHON set: it wins over the venv
    assert proc.returncode == 0 and seen and not venv_log.exists(), proc.stderr[-3000:]

    proc, _ = _run_sh(tmp_path, root=root, PYTHON=None)
    assert proc.returncode == 0 and json.loads(venv_log.read_text())["python"] == str(root / ".venv" / "bin" / "python")


def test_a_python_without_jax_stops_in_one_line_that_says_which_to_use(tmp_path):
    root = _tree(tmp_path)
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    (bare / "python3").write_text("#!/bin/sh\nexit 1\n")  # a python3 that imports nothing
    (bare / "python3").chmod(0o755)
    proc, seen = _run_sh(tmp_path, root=root, PYTHON=None, PATH=f"{bare}:{os.environ['PATH']}")
    assert proc.returncode == 1 and not seen
    assert proc.stderr.count("\n") == 1 and "python3 cannot import jax" in proc.stderr and "PYTHON=" in proc.stderr


# ---------------------------------------------------------------------------------------------------------------
# device_run.py: the plan, the memory check, the time guard


def test_the_full_plan_has_every_row_at_128_steps():
    rows = device_run.plan(device_run.FULL, {"rollout", "cartpole", "breakout"}, Path("/out"))
    assert [r.num_envs for r in rows["collector"]] == [2 ** k for k in (10, 12, 14, 16, 17)]
    sizes = [(env, n) for env in ("CartPole-v1", "Breakout-MinAtar") for n in (1, 4096, 65536)]
    assert [(r.env, r.num_envs) for r in rows["rejax"]] == sizes
    # rlpar: each size with single rows (the ratio's side), then with its own layout where that differs
    assert [(r.kind, r.env, r.num_envs) for r in rows["rlpar"]] == [
        (kind, env, n) for env, n in sizes for kind in ("rlpar", "rlpar-default") if kind == "rlpar" or n > 1]
    for kind in ("rlpar", "rejax"):
        for row in rows[kind]:
            flags = dict(zip(row.argv[::2], row.argv[1::2]))
            assert flags["--num-steps"] == "128" and flags["--num-envs"] == str(row.num_envs)
            if kind == "rlpar":
                assert flags["--collector-unroll"] == "0"  # the backend's collector, not a preset's
                assert flags["--shuffle-block"] == ("1" if row.kind == "rlpar" else "0")
    lines = [{"benchmark": "train", "program": "rlpar", "layout": layout, "env": "CartPole-v1", "num_envs": 8}
             for layout in ("single", "default")]
    assert [device_run.line_key(line)[0] for line in lines] == ["rlpar", "rlpar-default"]
    assert device_run.FULL.budget_s <= 570  # a command on the TPU machine may last at most 600 s


def test_breakout_at_65536_envs_is_skipped_where_its_observations_cannot_fit():
    rows = {(r.env, r.num_envs): r for r in
            device_run.plan(device_run.FULL, {"cartpole", "breakout"}, Path("/out"))["rlpar"]}
    v5e = int(15.75 * 2 ** 30)
    assert "13.4 GB" in device_run.too_big(rows["Breakout-MinAtar", 65536], v5e)
    assert device_run.too_big(rows["Breakout-MinAtar", 4096], v5e) is None
    assert device_run.too_big(rows["CartPole-v1", 65536], v5e) is None
    assert device_run.too_big(rows["Breakout-MinAtar", 65536], 141 * 10 ** 9) is None  # an H200's memory
    assert device_run.too_big(rows["Breakout-MinAtar", 65536], None) is None  # a CPU says nothing


def test_each_process_gets_its_share_of_what_is_left_and_never_past_the_end():
    clock = device_run.Clock(device_run.FULL, started=time.time() - 30)  # 30 s spent installing
    deadline, stop_at = clock.share("collector", ["collector", "rlpar", "rejax"])
    left = 540
    expected = left * device_run.EXPECTED_S["collector"] / sum(device_run.EXPECTED_S.values())
    assert deadline - time.time() == pytest.approx(expected, abs=2)
    assert stop_at - deadline == pytest.approx(device_run.FULL.grace_s, abs=1e-6)
    deadline, stop_at = clock.share("rejax", ["rejax"])  # the last takes all that is left
    assert deadline == pytest.approx(clock.end, abs=1) and stop_at == pytest.approx(clock.end, abs=1e-6)


def test_every_row_without_a_record_gets_its_reason():
    rows = [device_run.Row("rlpar", "CartPole-v1", n, []) for n in (1, 2, 3, 4)]
    lines = [{"benchmark": "train", "program": "rlpar", "env": "CartPole-v1", "num_envs": 1, "sps_end_to_end": 1.0},
             {"not_measured": "failed: ValueError: x", "benchmark": "train", "program": "rlpar", "env": "CartPole-v1",
              "num_envs": 2}]
    why = device_run.reasons(rows, lines, "timed out after 90s")
    assert why == {("rlpar", "CartPole-v1", 2): "failed: ValueError: x",
                   ("rlpar", "CartPole-v1", 3): "stopped by the time guard (timed out after 90s)",
                   ("rlpar", "CartPole-v1", 4): "not started: out of time"}
    assert "exit 1" in device_run.reasons(rows[2:3], [], "failed (exit 1)")[("rlpar", "CartPole-v1", 3)]


def test_rows_past_their_deadline_are_not_started_but_named(tmp_path):
    train = subprocess.run(
        [sys.executable, str(BENCHMARKS / "train_sps.py"), "--num-envs", "2", "--deadline", "1", "--then",
         "--env", "Breakout-MinAtar", "--num-envs", "4", "--deadline", "1"],
        env={**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}, capture_output=True, text=True,
        timeout=300)
    peer = subprocess.run(  # standard library only until a row starts: rejax need not be installed
        [sys.executable, str(BENCHMARKS / "peers.py"), "--inside", "rejax", "--num-envs", "8", "--deadline", "1"],
        capture_output=True, text=True, timeout=300)
    for proc in (train, peer):
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert [json.loads(line) for line in train.stdout.splitlines()] == [
        {"not_measured": "not started: out of time", "benchmark": "train", "program": "rlpar", "layout": "default",
         "env": env, "num_envs": n} for env, n in (("CartPole-v1", 2), ("Breakout-MinAtar", 4))]
    assert json.loads(peer.stdout) == {"not_measured": "not started: out of time", "benchmark": "train",
                                       "program": "rejax", "env": "CartPole-v1", "num_envs": 8}


def test_the_time_guard_ends_the_run_within_its_budget_and_names_every_row(tmp_path):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("REJAX_SITE", "DEVICE_RUN_STARTED")}
    start = time.time()
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "device_run.py"), "--quick", "--budget-s", "2",
                           "--parts", "rollout,cartpole", "--out", str(out)],
                          env={**env, "PYTHONPATH": str(REPO), "REJAX_PYTHON": str(tmp_path / "no-python")},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert time.time() - start < 60  # about 2 s of rows, then the summary (a probe of the device if none recorded)
    summary = (out / "summary.md").read_text()
    not_measured = dict(line[2:].split(": ", 1) for line in summary.split("Not measured:\n")[1].splitlines() if line)
    assert sorted(not_measured) == sorted(["collector, CartPole-v1, 16 envs"] + [
        f"PPO, {kind}, CartPole-v1, 1 env" for kind in ("rlpar (single rows)", "rejax")])
    for row, why in not_measured.items():  # each process either stopped before a row, or the guard stopped it
        if "rejax" in row:
            assert why.startswith("rejax is not installed"), row
        else:
            assert why == "not started: out of time" or why.startswith("stopped by the time guard"), (row, why)
    assert json.loads((out / "accelerator.json").read_text())["backend"] == "cpu"


# ---------------------------------------------------------------------------------------------------------------
# End to end


@pytest.mark.slow
def test_several_rows_run_in_one_process_and_a_failed_row_does_not_stop_the_next(tmp_path):
    out = tmp_path / "train.jsonl"
    tiny = ["--num-steps", "8", "--total-timesteps", "64", "--log-every", "1", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "train_sps.py"), "--num-envs", "4", *tiny, "--then", "--num-envs", "3",
         "--num-minibatches", "5", *tiny, "--then", "--env", "Breakout-MinAtar", "--num-envs", "8", *tiny],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 1  # a row failed
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(line["env"], line["num_envs"], "not_measured" in line) for line in lines] == [
        ("CartPole-v1", 4, False), ("CartPole-v1", 3, True), ("Breakout-MinAtar", 8, False)]
    assert lines[1]["not_measured"].startswith("failed: ValueError: num_minibatches=5")  # 24 steps in 5 parts
    assert [(r["env"], r["num_envs"]) for r in _read(out)] == [("CartPole-v1", 4), ("Breakout-MinAtar", 8)]


@pytest.mark.slow
def test_quick_device_run_from_elsewhere_writes_positive_sps_for_every_row(tmp_path):
    out = tmp_path / "out"
    unrelated = tmp_path / "unrelated"  # as the TPU machine's folder with JAX: must stay on the path
    unrelated.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("REJAX_PYTHON", "REJAX_SITE", "INDEX_URL")}
    env.update(PYTHON=sys.executable, PYTHONPATH=str(unrelated), DEVICE_SITE=str(tmp_path / "site"))
    proc = subprocess.run(["bash", str(BENCHMARKS / "device_run.sh"), "--quick", "--offline", "--out", str(out)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rejax_skipped = "rejax's rows are skipped" in proc.stderr
    if rejax_skipped:
        warnings.warn("rejax is not installed here (no wheels for it in .whl/, no benchmarks/.peers/rejax-venv): "
                      "device_run.sh skipped its rows")

    rollout = _read(out / "rollout.jsonl")
    assert sorted((r["program"], r["num_envs"]) for r in rollout) == [
        ("bare", 16), ("bare-tuned", 16), ("engine", 16)]
    for r in (r for r in rollout if r["program"] == "engine"):  # against the faster bare loop
        best = max((b for b in rollout if b["program"] != "engine" and b["num_envs"] == r["num_envs"]),
                   key=lambda b: b["sps_median"])
        assert r["best_bare"] == best["program"]
        assert r["overhead_vs_bare"] == pytest.approx(best["sps_median"] / r["sps_median"] - 1)
    for name, sizes in (("ppo_cartpole.jsonl", (1,)), ("ppo_breakout.jsonl", (8,))):
        records = _read(out / name)
        rows = sorted((device_run.line_kind(r), r["num_envs"]) for r in records)
        expected = ([("rlpar", n) for n in sizes] + [("rlpar-default", n) for n in sizes if n > 1]
                    + ([] if rejax_skipped else [("rejax", n) for n in sizes]))
        assert rows == sorted(expected), name
        assert {r["layout"] for r in records if r["program"] == "rlpar"} == (
            {"single", "default"} if max(sizes) > 1 else {"single"})
    for record in rollout + _read(out / "ppo_cartpole.jsonl") + _read(out / "ppo_breakout.jsonl"):
        assert (record.get("sps_end_to_end") or record["sps_median"]) > 0, record
        assert record["cpu"] and record["time_utc"] and record["host_cpus"] >= 1  # common.host_fields
        assert record["backend"] == "cpu"

    accelerator = json.loads((out / "accelerator.json").read_text())
    assert accelerator["backend"] == accelerator["jax_platforms"] == "cpu" and accelerator["device"] == "cpu:0"
    summary = (out / "summary.md").read_text()
    assert summary in proc.stdout  # printed at the end too
    assert summary.startswith("Accelerator: cpu (cpu; cpu:0") and "| 8 envs |" in summary
    own = next(line for line in summary.splitlines() if line.startswith("| 8 envs |")).split(" | ")[-1]
    assert own != "n/a |" and "rlpar's own layout SPS" in summary  # the own-layout row, beside the ratio's
    assert ("Not measured" in summary) == rejax_skipped


@pytest.mark.slow  # resolves against the package index (about a minute); CI runs it (-m slow)
def test_the_cuda_extra_resolves_to_the_cuda_plugin_of_the_jax_it_installs(tmp_path):
    """``pip install -e ".[cuda]"`` (README), resolved without installing: JAX, jaxlib and the CUDA plugin of one
    release inside the declared range."""
    import tomllib

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cuda"]
    report = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
                           "--report", str(report), *extra], capture_output=True, text=True, timeout=600)
    if proc.returncode and any(s in proc.stderr for s in ("NewConnectionError", "Temporary failure", "No route")):
        pytest.skip(f"the package index cannot be reached here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    installs = json.loads(report.read_text())["install"]
    versions = {item["metadata"]["name"]: item["metadata"]["version"] for item in installs}
    assert versions["jax"] == versions["jaxlib"] == versions["jax-cuda13-plugin"], versions
    assert (0, 10, 2) <= tuple(map(int, versions["jax"].split(".")[:3])) < (0, 12), versions
