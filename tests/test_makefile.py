"""The Makefile's targets expand to the commands the docs promise (``make -n``: nothing runs)."""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def dry_run(*args):
    """The commands ``make`` would run for ``args``, with no BLOCK in the environment."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(ROOT)}
    done = subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, env=env,
                          check=True)
    return done.stdout


def test_make_test_runs_every_block():
    """Plain ``make test`` selects no block: the whole suite (CI's command) runs."""
    command = dry_run("test")
    assert "pytest" in command
    assert "--block" not in command
    assert "--innet-replay='make test'" in command


@pytest.mark.parametrize("target, expected", [
    ("test", "--block=spillway.node"),
    ("sim", "tools.sim spillway.node"),
    ("mutants", "tools.mutants spillway.node"),
])
def test_block_reaches_its_target(target, expected):
    assert expected in dry_run(target, "BLOCK=spillway.node")


def test_defaults_of_sim_and_mutants():
    """``make sim`` runs the default demonstration; ``make mutants`` the spill switch's sources."""
    assert dry_run("sim").splitlines()[-1].split()[1:] == ["-m", "tools.sim"]
    assert "tools.mutants spillway.switch" in dry_run("mutants")
