"""The code's one format: ruff format for Python, snakefmt for the workflow (settings in
pyproject.toml). Run `ruff format src tests benchmarks` and `snakefmt workflow/Snakefile workflow/rules`."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _check(*command):
    result = subprocess.run([str(BIN / command[0]), *command[1:]], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout}{result.stderr}"


def test_python_is_formatted():
    _check("ruff", "format", "--check", "src", "tests", "benchmarks")


def test_workflow_is_formatted():
    _check("snakefmt", "--check", "workflow/Snakefile", "workflow/rules")
