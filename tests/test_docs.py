"""The user's README stays short and its test command is CI's; the benchmark index covers every
script in scripts/; every link from the README and docs/ to a file of the repository resolves."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_is_short_and_ci_runs_its_test_command():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    command = next(line for line in readme.splitlines() if "pytest" in line and line.startswith("python3 -m venv"))
    assert command in (ROOT / ".ci" / "run").read_text()


def test_the_benchmark_index_names_every_script():
    index = (ROOT / "docs" / "benchmarks.md").read_text()
    missing = [p.name for p in (ROOT / "scripts").glob("*.py") if f"`{p.name}`" not in index]
    assert not missing, missing


def test_links_to_repository_files_resolve():
    broken = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text()):
            if not (doc.parent / target).exists():
                broken.append(f"{doc.name}: {target}")
    assert not broken, broken
