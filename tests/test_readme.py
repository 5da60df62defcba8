"""The README's code runs, and CI runs the README's test command verbatim."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _bash_commands() -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", README, re.S)]


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_second():
    setup = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = [b.strip() for b in re.findall(r"```bash\n(.*?)```", setup, re.S)]
    assert commands == ['python -m pip install . && nbquant demo',
                        'python -m pip install -e ".[test]" && python -m pytest']
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert commands[1] in ci


@pytest.mark.nosim
def test_readme_python_examples_run():
    code = "\n".join(re.findall(r"```python\n(.*?)```", README, re.S))
    assert code
    exec(compile(code, "README.md", "exec"), {})  # noqa: S102
