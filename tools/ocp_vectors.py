"""Record OCP MRC's EV-expansion example as test data: compile and run ``ev_expansion.c`` at a commit.

    python -m tools.ocp_vectors GIT_DIR [--commit SHA] [--out testbenches/data/ocp_ev_expansion.json]

``GIT_DIR`` is a git directory of opencomputeproject/OCP-Multipath-Reliable-Connection (a clone or a
bare mirror). The program is taken from the commit (``git show``), built with the system's ``gcc`` as its
header says (``gcc ev_expansion.c -o ev_expansion``) in a temporary folder and run; its printout (ten
profiles, eight EVs each, ``srandom(0)``) is parsed into JSON: per profile its format type and widths,
EV type, fields (OCP's ``width``, ``init_val``, ``min_val``, ``max_val``, ``mask``) and cases (the EV, the
field values and the expanded EV, both as the program dumps the 32-byte ``ev_t``), with the repository,
commit, blob id and compiler. OCP's code is not copied into innet: only its output is.
"""
import json
import re
import subprocess
import tempfile
from pathlib import Path

from tools import cli

REPOSITORY = "opencomputeproject/OCP-Multipath-Reliable-Connection"
PATH = "examples/ev_expansion/ev_expansion.c"
COMMIT = "662a1509e7e49315ae912099ceec3874a04b1442"
OUT = Path(__file__).resolve().parent.parent / "testbenches" / "data" / "ocp_ev_expansion.json"

FIELD = re.compile(r"^\s+(\d+): width=(\d+), init_val=0x([0-9a-f]+), min=0x([0-9a-f]+) max=0x([0-9a-f]+) "
                   r"mask=0x([0-9a-f]+)$")


def parse(text):
    """The profiles of the program's printout."""
    profiles, lines, k = [], text.splitlines(), 0
    while k < len(lines):
        line = lines[k]
        k += 1
        if line.startswith("-- ") and not line.startswith("-----"):
            profiles.append({"name": line.strip("- "), "fmt_widths": [], "fields": [], "cases": []})
        elif line.startswith("  type:"):
            key = "fmt_type" if "fmt_type" not in profiles[-1] else "ev_type"
            profiles[-1][key] = line.split(":", 1)[1].strip()
        elif re.match(r"^\s+\d+: width=\d+$", line):
            profiles[-1]["fmt_widths"].append(int(line.split("=")[1]))
        elif FIELD.match(line):
            _, width, init, lo, hi, mask = FIELD.match(line).groups()
            profiles[-1]["fields"].append({"width": int(width), "init_val": int(init, 16), "min_val": int(lo, 16),
                                           "max_val": int(hi, 16), "mask": int(mask, 16)})
        elif re.match(r"^\s+\d+: 0x[0-9a-f]{64}$", line) and "evs" in profiles[-1]:
            profiles[-1]["evs"].append(line.split("0x")[1])
        elif line.startswith("  evs:"):
            profiles[-1]["evs"] = []
        elif re.match(r"^\s+\d+: fld0=", line):
            values = [int(v, 16) for v in re.findall(r"fld\d+=0x([0-9a-f]+)", line)]
            exp_ev = lines[k].strip()[2:]
            k += 1
            n = len(profiles[-1]["cases"])
            profiles[-1]["cases"].append({"ev": profiles[-1]["evs"][n], "field_values": values, "exp_ev": exp_ev})
    for p in profiles:
        del p["evs"]
    return profiles


def git(git_dir, *args):
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def record(git_dir, commit):
    """The JSON document of the example at ``commit`` of ``git_dir``."""
    commit = git(git_dir, "rev-parse", f"{commit}^{{commit}}")
    blob = git(git_dir, "rev-parse", f"{commit}:{PATH}")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "ev_expansion.c"
        source.write_text(git(git_dir, "show", f"{commit}:{PATH}") + "\n")
        subprocess.run(["gcc", str(source), "-o", str(Path(tmp) / "ev_expansion")], check=True, capture_output=True)
        text = subprocess.run([str(Path(tmp) / "ev_expansion")], check=True, capture_output=True, text=True).stdout
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    profiles = parse(text)
    if len(profiles) != 10 or any(len(p["cases"]) != 8 for p in profiles):
        raise ValueError(f"expected 10 profiles of 8 cases, parsed {[len(p['cases']) for p in profiles]}")
    return {"repository": REPOSITORY, "commit": commit, "path": PATH, "blob": blob,
            "build": f"gcc ev_expansion.c -o ev_expansion ({gcc}); ./ev_expansion",
            "ev_t": "32 bytes as the program dumps them; bit 7 of byte 0 is the first bit",
            "profiles": profiles}


def main(argv=None):
    ap = cli.Parser(prog="ocp_vectors", description=__doc__.splitlines()[0])
    ap.add_argument("git_dir", type=Path)
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    doc = record(args.git_dir, args.commit)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{args.out}: {len(doc['profiles'])} profiles, {sum(len(p['cases']) for p in doc['profiles'])} cases "
          f"({doc['commit'][:12]}, blob {doc['blob'][:12]})")


if __name__ == "__main__":
    cli.run("ocp_vectors", main)
