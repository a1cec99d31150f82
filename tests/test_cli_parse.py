"""Flags generated from config dataclasses: tuple flags are parsed strictly, and bad ones stop argparse in one line."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlpar import cli

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
