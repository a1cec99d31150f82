"""Every shell and Python block of README.md, benchmarks/README.md and docs/*.md runs as written, or says why it
cannot.

The convention (documented in docs/index.md, "Tested examples"): the line before a fenced ``bash`` or ``python``
block is one of

    <!-- test: run [FLAGS] -->      run in the default test run
    <!-- test: slow [FLAGS] -->     run with ``python -m pytest -m slow`` (takes minutes, or several compiles)
    <!-- test: skip (REASON) -->    never run here; REASON says why (a cluster, a GPU, an install from PyPI, ...)

FLAGS, if given, are appended to every ``python -m rlpar.train`` command of a shell block (replacing the command's
own value of any of them: a flag may not be given twice), so a block can show a full run while the test trains a
small budget. Every ``python -m rlpar.train`` command of a skipped shell block (but ``--resume``, which needs a run)
runs with ``--dry-run``, which checks everything and compiles nothing, so no documented command can fail to parse.
Each block runs in a fresh temporary directory, so its relative paths land there, with this checkout importable
(``PYTHONPATH``) and this interpreter's directory first on ``PATH`` (``python`` is the test's python); shell blocks
run with ``bash -e``, Python blocks as a script in a fresh process. ``WANDB_MODE=offline`` is set, so no block
reaches the network. Each block has a compile cache of its own (``RLPAR_CACHE_DIR``), empty at its start. A block
(or a skipped block's command) that uses an optional extra this venv lacks (an env of a suite, ``--wandb``) is
skipped with the extra's name: the README's test command installs only ``.[test]``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from envs.suites import SUITES

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", REPO / "benchmarks" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LANGUAGES = {"bash": "shell", "sh": "shell", "shell": "shell", "python": "python"}
_FENCE = re.compile(r"^```(\w+)\s*$")
_MARKER = re.compile(r"^<!-- test: (run|slow|skip)\b(.*?)-->\s*$")
_TRAIN = re.compile(r"python -m rlpar\.train\b[^\n;&|#]*")
TIMEOUT_S = {"run": 300, "slow": 900}


class Block(NamedTuple):
    where: str  # "docs/cli.md:12", the line of the opening fence
    language: str  # "shell" or "python"
    code: str
    mode: str | None  # "run", "slow", "skip"; None: no marker
    detail: str  # the flags (run, slow) or the reason (skip)


def blocks(path: Path) -> list[Block]:
    """The shell and Python blocks of a markdown file, each with the marker on the line before it."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        language = LANGUAGES.get(fence.group(1))
        if language is not None:
            marker = _MARKER.match(lines[i - 1]) if i else None
            found.append(Block(f"{path.relative_to(REPO)}:{i + 1}", language, "\n".join(lines[i + 1:end]) + "\n",
                               marker.group(1) if marker else None, marker.group(2).strip() if marker else ""))
        i = end + 1
    return found


def _flag_pattern(flag: str, takes_value: bool) -> re.Pattern:
    """``flag`` in a command, with its value if it takes one (a quoted value whole)."""
    value = r"""(?:=\S+|\s+(?:"[^"]*"|'[^']*'|[^\s"']+))""" if takes_value else ""
    return re.compile(rf"\s{re.escape(flag)}{value}(?=\s|$)")


def with_flags(script: str, flags: str) -> str:
    """``script`` with ``flags`` appended to each ``python -m rlpar.train`` command (before ``&&``, ``;``, ``|``,
    ``&`` or a comment), each flag of ``flags`` the command gives already taken out of it first (with its value);
    a ``--resume`` or ``--help`` command is left as it is."""
    if not flags:
        return script
    tokens = flags.split()
    given = [(t, i + 1 < len(tokens) and not tokens[i + 1].startswith("--")) for i, t in enumerate(tokens)
             if t.startswith("--")]

    def append(match: re.Match) -> str:
        command = match.group(0)
        if "--resume" in command or "--help" in command:
            return command
        stripped = command.rstrip()
        for flag, takes_value in given:
            stripped = _flag_pattern(flag, takes_value).sub("", stripped)
        return f"{stripped} {flags}{command[len(command.rstrip()):]}"

    return _TRAIN.sub(append, _joined(script))


def _joined(script: str) -> str:
    """``script`` with its continued lines (a ``\\`` at the end) joined into one."""
    return re.sub(r"[ \t]*\\\n\s*", " ", script)


ALL_BLOCKS = [block for path in DOCUMENTS for block in blocks(path)]


def _param(block: Block):
    marks = {"slow": [pytest.mark.slow], "skip": [pytest.mark.skip(reason=block.detail[1:-1])]}.get(block.mode, [])
    return pytest.param(block, id=block.where, marks=marks)


_SUITE_ENV = {"craftax": re.compile(r"Craftax-"), "brax": re.compile(r"\bbrax-"), "marl": re.compile(r"\bmarl-")}
_WANDB = re.compile(r"--wandb\b|import wandb")


def _importable(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None


def missing_extras(code: str) -> list[str]:
    """The optional extras that ``code`` (a block, or one command) uses and this venv lacks."""
    missing = [name for name, uses in _SUITE_ENV.items()
               if uses.search(code) and not _importable(SUITES[name].package)]
    if _WANDB.search(code) and not _importable("wandb"):
        missing.append("wandb")
    return missing


def skip_without_extras(code: str, where: str) -> None:
    missing = missing_extras(code)
    if missing:
        pytest.skip(f"{where} needs the {', '.join(missing)} extra: pip install -e \".[{','.join(missing)}]\"")


def test_missing_extras_reads_envs_and_flags():
    assert missing_extras("python -m rlpar.train ppo --env CartPole-v1") == []
    expected = [name for name in ("marl",) if not _importable(SUITES[name].package)]
    assert missing_extras("python -m rlpar.train ippo --env marl-MPE_simple_spread_v3") == expected
    assert missing_extras("python -m rlpar.train ppo --wandb") == ([] if _importable("wandb") else ["wandb"])


def test_every_shell_and_python_block_is_marked():
    unmarked = [b.where for b in ALL_BLOCKS if b.mode is None]
    assert not unmarked, f"blocks without a <!-- test: run|slow|skip --> line before them: {unmarked}"
    unexplained = [b.where for b in ALL_BLOCKS if b.mode == "skip" and not re.fullmatch(r"\(.+\)", b.detail)]
    assert not unexplained, f"skipped blocks without a (reason): {unexplained}"
    flagged_python = [b.where for b in ALL_BLOCKS if b.language == "python" and b.mode != "skip" and b.detail]
    assert not flagged_python, f"flags only apply to shell blocks: {flagged_python}"


def test_flags_go_to_each_training_command_only():
    script = ("python -m rlpar.train ppo --run-dir a && python -m rlpar.plot a  # plot\n"
              "for s in 0 1; do python -m rlpar.train ppo --seed $s; done\n"
              "python -m rlpar.train --resume a\n")
    assert with_flags(script, "--total-timesteps 8") == (
        "python -m rlpar.train ppo --run-dir a --total-timesteps 8 && python -m rlpar.plot a  # plot\n"
        "for s in 0 1; do python -m rlpar.train ppo --seed $s --total-timesteps 8; done\n"
        "python -m rlpar.train --resume a\n")


def test_flags_replace_the_commands_own_value_of_them():
    # The parser refuses a flag given twice with different values, so the block's own value gives way (a quoted
    # one whole), and a flag that only starts the same stays.
    script = ('python -m rlpar.train ppo --total-timesteps 2000000 \\\n    --search "lr=0.1,0.2 gamma=0.9" '
              '--tensorboard --total-timesteps-x 1\n')
    assert with_flags(script, "--total-timesteps 8 --search 'gamma=0.9,0.99' --eval-every 0") == (
        "python -m rlpar.train ppo --tensorboard --total-timesteps-x 1 --total-timesteps 8 --search 'gamma=0.9,0.99' "
        "--eval-every 0\n")


def test_the_readme_and_every_page_are_found():
    names = {p.name for p in DOCUMENTS}
    assert {"README.md", "index.md", "cli.md", "library.md"} <= names
    assert any(b.mode == "run" for b in ALL_BLOCKS)


def _block_env() -> dict:
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": python_path,
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            "MPLBACKEND": "Agg", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}


@pytest.mark.parametrize("block", [_param(b) for b in ALL_BLOCKS if b.mode is not None])
def test_doc_block_runs(block: Block, tmp_path):
    skip_without_extras(block.code, block.where)
    # a compile cache of the block's own, as a user's commands have one (~/.cache/rlpar/jax): a block's repeated
    # commands (seeds, train then evaluate) load what the first one compiled
    env = {**_block_env(), "RLPAR_CACHE_DIR": str(tmp_path / "cache")}
    if block.language == "shell":
        script = tmp_path / "block.sh"
        script.write_text(with_flags(block.code, block.detail))
        argv = ["bash", "-e", str(script)]
    else:
        script = tmp_path / "block.py"
        script.write_text(block.code)
        argv = [sys.executable, str(script)]
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=TIMEOUT_S[block.mode])
    assert proc.returncode == 0, (f"{block.where} exited with {proc.returncode}:\n{script.read_text()}\n"
                                  f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}")


def training_commands(block: Block) -> list[str]:
    """The ``python -m rlpar.train`` commands of a shell block, each on one line; not ``--resume RUN_DIR`` (it needs
    a run) nor ``--help``."""
    commands = [m.group(0).strip() for m in _TRAIN.finditer(_joined(block.code))]
    return [c for c in commands if "--resume" not in c and "--help" not in c]


SKIPPED_COMMANDS = [(b.where, command) for b in ALL_BLOCKS if b.mode == "skip" and b.language == "shell"
                    for command in training_commands(b)]


def test_skipped_blocks_training_commands_are_found():
    found = {(where.split(":")[0], command) for where, command in SKIPPED_COMMANDS}  # the file, not its line
    assert ("docs/multi-agent.md", "python -m rlpar.train ippo --env marl-MPE_simple_spread_v3 --num-envs 16 "
            "--num-steps 128 --total-timesteps 10000000 --lr 2.5e-4 --anneal-lr true --update-epochs 4 "
            "--num-minibatches 4 --gamma 0.99 --gae-lambda 0.95 --clip-eps 0.2 --ent-coef 0.01 --vf-coef 0.5 "
            "--max-grad-norm 0.5 --hidden-sizes 64,64 --activation tanh") in found
    assert len(SKIPPED_COMMANDS) >= 9 and not [c for _, c in SKIPPED_COMMANDS if "--resume" in c]


@pytest.mark.parametrize("where, command", SKIPPED_COMMANDS,
                         ids=[f"{where}:{i}" for i, (where, _) in enumerate(SKIPPED_COMMANDS)])
def test_skipped_blocks_training_command_passes_a_dry_run(where, command, tmp_path):
    # A skipped block never runs here; its training commands still must parse and pass every check a run makes.
    skip_without_extras(command, where)
    proc = subprocess.run(["bash", "-c", f"{command} --dry-run"], cwd=tmp_path, env=_block_env(),
                          capture_output=True, text=True, timeout=TIMEOUT_S["run"])
    assert proc.returncode == 0, f"{where}: {command} --dry-run exited with {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert "dry run: every check passed" in proc.stdout and "compiled in" not in proc.stdout + proc.stderr


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_ANCHOR_ID = re.compile(r'<a id="([^"]+)"></a>')


def anchors(path: Path) -> set[str]:
    """The anchors a markdown file offers: GitHub's slug of each heading (lower case, punctuation but ``-`` and
    ``_`` dropped, spaces to ``-``), and each ``<a id="...">``."""
    text = path.read_text()
    found = set(_ANCHOR_ID.findall(text))
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_every_relative_link_reaches_a_file_and_anchor():
    broken = []
    for page in DOCUMENTS:
        for target in _LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            linked = (page.parent / file_part).resolve() if file_part else page
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, broken


def test_every_page_is_in_the_index_and_the_mkdocs_nav():
    index, nav = (REPO / "docs" / "index.md").read_text(), (REPO / "mkdocs.yml").read_text()
    pages = [p.name for p in sorted((REPO / "docs").glob("*.md")) if p.name != "index.md"]
    assert [p for p in pages if f"]({p})" not in index] == []
    assert [p for p in pages if f": {p}" not in nav] == []
