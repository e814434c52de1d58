"""The CI workflow (.github/workflows/ci.yml) parses, every command it runs exists (each ``make`` target in the
Makefile, each program in the repository or on this machine), its regress matrix covers every shard of its
split and its merge job reads what the shards upload."""
import re
import shlex
import shutil
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"


def makefile_targets():
    return {name for line in (ROOT / "Makefile").read_text().splitlines()
            for name in re.findall(r"^([\w.-]+)\s*:(?!=)", line)}


def commands(workflow):
    """(job, command words) of every simple command of every ``run:`` step (``&&``, ``;``, ``||`` and lines
    split), ``${{ ... }}`` expressions replaced by a word."""
    for name, job in workflow["jobs"].items():
        for step in job["steps"]:
            text = re.sub(r"\$\{\{[^}]*\}\}", "X", step.get("run", ""))
            for part in re.split(r"&&|\|\||;|\n", text):
                if part.strip():
                    yield name, shlex.split(part)


def test_workflow_parses_and_its_commands_exist():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert {"test", "regress", "regress-merge"} <= set(workflow["jobs"]), list(workflow["jobs"])
    targets, runs = makefile_targets(), list(commands(workflow))
    assert ("test", ["make", "test"]) in runs and ("regress-merge", ["make", "regress-merge"]) in runs, runs
    for job, words in runs:
        if words[0] == "sudo":
            words = words[1:]
        program = words[0]
        if program == "make":
            for target in (w for w in words[1:] if "=" not in w and not w.startswith("-")):
                assert target in targets, f"{job}: make {target}: no such target in the Makefile"
        elif "/" in program:
            assert (ROOT / program).is_file(), f"{job}: {program} is not in the repository"
        else:
            assert shutil.which(program), f"{job}: {program} is no program on this machine"
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"actions/[\w-]+@v\d+", step["uses"]), f"{step['uses']}: pin a released version"


def test_regress_matrix_covers_its_shards():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    regress = workflow["jobs"]["regress"]
    run = next(s["run"] for s in regress["steps"] if "make regress" in s.get("run", ""))
    count = int(re.search(r"SHARD=\$\{\{ matrix\.shard \}\}/(\d+)", run)[1])
    assert regress["strategy"]["matrix"]["shard"] == list(range(1, count + 1))
    upload = next(s for s in regress["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["with"]["path"] == "build/regress/shard-*.xml", "regress-merge reads build/regress/shard-*.xml"
    merge = workflow["jobs"]["regress-merge"]
    assert merge["needs"] == "regress"
    download = next(s for s in merge["steps"] if s.get("uses", "").startswith("actions/download-artifact"))
    assert download["with"]["path"] == "build/regress" and download["with"]["merge-multiple"] is True
