"""Flags generated from config dataclasses: tuple flags are parsed strictly, and bad ones stop argparse in one line."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlpar.tools import cli

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("text, expected", [("64,64", (64, 64)), ("16", (16,)), (" 32, 8 ", (32, 8))])
def test_int_tuples_parse(text, expected):
    assert cli.parse_int_tuple(text) == expected


@pytest.mark.parametrize("text", ["64,,64", "64,", ",64", "", "64,0", "-1", "64,x", "1.5"])
def test_empty_non_integer_and_non_positive_parts_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected comma-separated positive integers, e.g. 64,64"):
        cli.parse_int_tuple(text)


def test_train_cli_refuses_an_empty_hidden_size_in_one_line():
    # Before: "64,,64" silently trained a (64, 64) network.
    proc = subprocess.run(
        [sys.executable, "-m", "rlpar.train", "ppo", "--env", "CartPole-v1", "--hidden-sizes", "64,,64",
         "--total-timesteps", "256"],  # small, so that the unfixed parser fails the test fast
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2
    assert "'64,,64'" in proc.stderr and "e.g. 64,64" in proc.stderr and "Traceback" not in proc.stderr
    error_lines = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(error_lines) == 1, proc.stderr


# ---- No flag keeps only the last of two values: a table of every flag of every parser, read from the parsers ----

CANDIDATES = ("1", "2", "0.5", "8,8", "true", "false", "best", "a", "b")  # values to give a flag, by its type


def _run_flag(action: argparse.Action) -> bool:
    return action.dest.startswith("RunConfig.") or action.dest in ("resume", "dry_run")


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Each tool's parser: ``train`` (rlpar.tools.train's run flags, read from PPO's parser: every agent has the same),
    ``train AGENT`` (that agent's own flags) for every registered agent, ``evaluate``, ``plot``."""
    from rlpar.tools import evaluate, plot, registry, train

    agents = {f"train {name}": train.make_parser(registry.get(name)) for name in registry.names()}
    return {"train": agents["train ppo"], **agents, "evaluate": evaluate.make_parser(), "plot": plot.make_parser()}


def _own_flags(label: str, parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The flags the table covers under ``label`` (no --help)."""
    flags = [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
    if label == "train":
        return [a for a in flags if _run_flag(a)]
    if label.startswith("train "):
        return [a for a in flags if not _run_flag(a)]
    return flags


PARSERS = _parsers()
TABLE = [(label, option) for label, parser in PARSERS.items() for action in _own_flags(label, parser)
         for option in action.option_strings]


def _values(action: argparse.Action) -> tuple[str, str]:
    """Two texts the flag takes, with different meanings."""
    if isinstance(action, cli.Fields):
        return "lr=0.1,0.2", "gamma=0.9"
    convert, found = action.type or str, {}
    for text in CANDIDATES:
        try:
            value = convert(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
        if value not in found.values():
            found[text] = value
        if len(found) == 2:
            return tuple(found)
    raise AssertionError(f"{action.option_strings}: no two of {CANDIDATES} parse to different values")


def _parse(parser, argv):
    """``parser.parse_args(argv)``, after a placeholder for each positional argument (evaluate's and plot's
    RUN_DIR)."""
    return parser.parse_args(["RUN" for a in parser._actions if not a.option_strings] + argv)


def _refused(parser, argv, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        _parse(parser, argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def test_the_table_covers_every_parser_and_flag():
    assert set(PARSERS) == {"train", "train ppo", "train ppo_rnn", "train pqn", "train dqn", "train sac",
                            "train ippo", "train mappo", "evaluate", "plot"}
    options = {option for _, option in TABLE}
    assert {"--search", "--sweep", "--lr", "--no-compile-cache", "--tensorboard", "--no-tensorboard", "--resume",
            "--hidden-sizes", "--episodes", "--slot", "--gif", "--out"} <= options
    for label, parser in PARSERS.items():  # every flag of every parser is in the table
        missing = {o for a in parser._actions for o in a.option_strings} - options - {"-h", "--help"}
        assert not missing, f"{label}: {missing}"


@pytest.mark.parametrize("label, option", TABLE, ids=[f"{label}:{option}" for label, option in TABLE])
def test_a_repeated_flag_adds_up_or_must_agree(label, option, capsys):
    parser = PARSERS[label]
    action = parser._option_string_actions[option]
    assert isinstance(action, (cli.Once, cli.OnceConst, cli.Fields)), (
        f"{option} uses {type(action).__name__}, which may keep only the last of two values")
    if action.nargs == 0:  # --no-tensorboard: twice is the same
        assert getattr(_parse(parser, [option, option]), action.dest) == action.const
        return
    first, second = _values(action)
    if isinstance(action, cli.Fields):  # the fields add up (a field given twice is for --search's parser to refuse)
        assert getattr(_parse(parser, [option, first, option, second]), action.dest) == f"{first} {second}"
        return
    once = getattr(_parse(parser, [option, first]), action.dest)
    assert getattr(_parse(parser, [option, first, option, first]), action.dest) == once
    err = _refused(parser, [option, first, option, second], capsys)
    assert f"{option} is given twice with different values" in err


SHARED = [(label, a, b) for label, parser in PARSERS.items() for i, a in enumerate(_own_flags(label, parser))
          for b in _own_flags(label, parser)[i + 1:] if a.dest == b.dest]


@pytest.mark.parametrize("label, a, b", SHARED, ids=[f"{label}:{a.option_strings[0]}:{b.option_strings[0]}"
                                                     for label, a, b in SHARED])
def test_two_flags_that_set_one_thing_must_agree(label, a, b, capsys):
    # --tensorboard with --no-tensorboard, --compile-cache DIR with --no-compile-cache
    as_argv = {x: [x.option_strings[0]] if x.nargs in (0, "?") else [x.option_strings[0], "DIR"] for x in (a, b)}
    err = _refused(PARSERS[label], as_argv[a] + as_argv[b], capsys)
    assert a.option_strings[0] in err and b.option_strings[0] in err and "disagree" in err


def test_flags_that_set_one_thing_are_found():
    pairs = {(a.option_strings[0], b.option_strings[0]) for _, a, b in SHARED}
    assert ("--tensorboard", "--no-tensorboard") in pairs and ("--compile-cache", "--no-compile-cache") in pairs


# ---- --search and --sweep: repeated, several fields in one value, duplicates, values left over ----

def _train_parse(argv):
    from rlpar.tools import registry, train

    return train.parse_run_args(registry.get("ppo"), argv)


def test_repeated_search_flags_add_up_to_one_search():
    # Before: the first --search was dropped without a word (config.json said "ent_coef=0..0.02").
    from rlpar.core import seeds

    run_config, _ = _train_parse(["--search", "lr=log:1e-4..1e-2", "--search", "ent_coef=0..0.02",
                                  "--population", "4", "--pbt"])
    assert run_config.search == "lr=log:1e-4..1e-2 ent_coef=0..0.02"
    slots = seeds.make_slots(1, run_config.sweep, search=run_config.search, population=4)
    assert list(slots.spaces) == ["lr", "ent_coef"]


@pytest.mark.parametrize("argv", [["--sweep", "lr=1e-3,3e-3", "--sweep", "gamma=0.9,0.99"],
                                  ["--sweep", "lr=1e-3,3e-3 gamma=0.9,0.99"]], ids=["repeated", "one-value"])
def test_a_sweep_of_two_fields_sweeps_their_grid(argv):
    from agents.ppo import PPOConfig
    from rlpar.core import seeds

    run_config, _ = _train_parse(argv)
    slots = seeds.make_slots(2, run_config.sweep, PPOConfig)
    assert slots.count == 8  # 2 lr x 2 gamma x 2 seeds; the first field slowest, then gamma, then the seed
    assert slots.describe()[2] == {"slot": 2, "seed_index": 0, "lr": 1e-3, "gamma": 0.99}
    assert slots.describe()[7] == {"slot": 7, "seed_index": 1, "lr": 3e-3, "gamma": 0.99}


@pytest.mark.parametrize("argv, says", [
    (["--sweep", "lr=1e-3", "--sweep", "lr=3e-3"], "lr is given twice"),
    (["--search", "gamma=0.9,0.99", "--search", "gamma=0.95"], "gamma is given twice"),
    (["--sweep", "lr=1e-3,3e-3", "--search", "lr=1e-2,1e-1"], "both set lr"),
    (["--sweep", "lr=log:1e-4..1e-2"], "lr is a range; --sweep takes lists"),
], ids=["sweep-twice", "search-twice", "in-both", "sweep-range"])
def test_a_field_given_twice_is_refused_naming_it(argv, says):
    with pytest.raises(ValueError, match=says):
        _train_parse(argv)


def _main_refuses(argv, capsys) -> str:
    from rlpar.tools import train

    with pytest.raises(SystemExit) as stop:  # argparse's exit, before anything is built
        train.main(["ppo", *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


def test_two_fields_after_one_flag_say_to_quote_them(capsys):
    # Before: argparse's "unrecognized arguments: ent_coef=0..0.02", which did not say how to give both.
    err = _main_refuses(["--search", "lr=log:1e-4..1e-2", "ent_coef=0..0.02", "--population", "4"], capsys)
    assert "--search takes one value" in err and "--search 'lr=log:1e-4..1e-2 ent_coef=0..0.02'" in err
    assert "--search lr=log:1e-4..1e-2 --search ent_coef=0..0.02" in err


@pytest.mark.parametrize("text, expected", [("true", True), ("False", False), ("1", True), ("off", False)])
def test_a_bool_flag_takes_true_or_false(text, expected):
    _, config = _train_parse(["--anneal-lr", text])
    assert config.anneal_lr is expected


@pytest.mark.parametrize("argv, says", [
    (["--anneal-lr", "maybe"], "'maybe': expected true or false"),
    (["--no-anneal-lr", "false"], "unexpected 'false' after --no-anneal-lr, which takes no value"),
    (["--lr", "1e-3", "3e-3"], "unexpected '3e-3' after --lr 1e-3: --lr takes one value"),
    (["--num-env", "8"], "unknown flag --num-env; did you mean --num-envs"),  # no abbreviations
], ids=["bool-value", "no-form-value", "two-values", "unknown-flag"])
def test_other_bad_flags_are_one_line(argv, says, capsys):
    assert says in _main_refuses(argv, capsys)
