"""Record OCP MRC's EV-expansion example as test data: compile and run ``ev_expansion.c`` at a commit.

    python -m tools.ocp_vectors GIT_DIR [--commit SHA] [--out testbenches/data/ocp_ev_expansion.json]

``GIT_DIR`` is a git directory of opencomputeproject/OCP-Multipath-Reliable-Connection (a clone or a
bare mirror). The program is taken from the commit (``git show``), built with the system's ``gcc`` as its
header says (``gcc ev_expansion.c -o ev_expansion``) in a temporary folder and run; its printout (ten
profiles, eight EVs each, ``srandom(0)``) is parsed into JSON: per profile its format type and widths,
EV type, fields (OCP's ``width``, ``init_val``, ``min_val``, ``max_val``, ``mask``) and cases (the EV, the
field values and the expanded EV, both as the program dumps the 32-byte ``ev_t``), with the repository,
commit, blob id and compiler. ``check_profs`` holds OCP's own verdicts on innet's edge cases (``CHECKS``:
each rule of the program's ``check_profs`` broken once, and profiles it takes; per taken profile an EV it
expands, one with the bit after the consumed ones set and one with the last bit of ``ev_t`` set): a
driver (``HARNESS``, innet's) compiled with the program runs ``check_profs`` and ``dump_expanded_ev`` in a
forked child each, so that an ``assert`` (a refusal) ends the child only. OCP's code is not copied into
innet: only its output is.
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

#: innet's driver of the program's own functions (it includes the program; main renamed).
HARNESS = r"""
#define main ocp_example_main
#include "ev_expansion.c"
#undef main
#include <sys/wait.h>
#include <unistd.h>

static int survives(void (*fn)(int), int arg)
{
	int status;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		freopen("/dev/null", "w", stderr);
		fn(arg);
		fflush(stdout);
		_exit(0);
	}
	waitpid(pid, &status, 0);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void check(int unused) { (void)unused; check_profs(); }
static void expand(int i) { dump_expanded_ev(i); }

int main(void)
{
	unsigned nfmt, nfld, nev, i, j, byte;

	while (scanf("%u %u %u", &nfmt, &nfld, &nev) == 3) {
		EV_PROF_INIT(nfmt, nfld, nev);
		_ev_fmt_profile.type = EV_FMT_TYPE_SRV6;
		for (i = 0; i < nfmt; i++)
			scanf("%u", &_ev_fmt_profile.fmt_fields[i].width);
		for (i = 0; i < nfld; i++) {
			struct ev_field *f = &_ev_profile.fields[i];
			scanf("%u %x %x %x %x", &f->width, &f->init_val, &f->min_val, &f->max_val, &f->mask);
		}
		for (i = 0; i < nev; i++)
			for (j = 0; j < MAX_EV_LEN; j++) {
				scanf("%2x", &byte);
				_ev_profile.evs[i][j] = byte;
			}
		printf("\nprofile %d\n", survives(check, 0));
		for (i = 0; i < nev; i++)
			printf("\nev %d\n", survives(expand, i));
		EV_PROF_FREE();
	}
	return 0;
}
"""

#: innet's edge cases for OCP's verdicts: (format widths, fields as (width, init_val, min_val, max_val,
#: mask)); every format at most 32 bits a field (wider ones shift past 31 bits in the program).
CHECKS = [
    ([16], [(8, 0, 0, 0, 0), (8, 0, 0, 0, 0)]),                   # num_fields > num_fmt_fields
    ([8, 8], [(16, 0, 0, 0, 0), (1, 0, 0, 0, 0)]),                # sum of field widths > sum of fmt widths
    ([32, 32], [(33, 0, 0, 0, 0)]),                               # a field wider than 32 bits
    ([16], [(4, 0x10, 0, 0, 0)]),                                 # init_val wider than the field
    ([16], [(4, 0, 0, 0, 0x10)]),                                 # mask outside the field
    ([16], [(8, 0, 0, 0x10, 0x0F)]),                              # max_val wider than the mask's bits
    ([16], [(9, 0, 0, 0x200, 0x1FF)]),                            # the same at 9 mask bits
    ([16], [(9, 0, 0, 0x1FF, 0x1FF)]),                            # max_val as wide as the mask's bits
    ([16], [(8, 0, 7, 0xFFFFFFFF, 0)]),                           # max_val unchecked under a zero mask
    ([0, 16], [(0, 0, 0, 0, 0), (16, 0, 0, 0, 0xFFFF)]),          # zero widths
    ([8, 8, 16], [(16, 0xA500, 0, 0, 0x0F0F), (8, 0, 0, 0xFF, 0xFF)]),   # a field wider than its slot
    ([32, 16, 16], [(32, 0xFC000001, 0, 0, 0x0101), (16, 0x5A5A, 0, 0, 0xA5A5), (16, 0, 0, 3, 0x8001)]),
    ([32, 32, 32], [(32, 0, 0, 0, 0xFFFFFFFF), (32, 0, 0, 0, 0xFFFFFFFF), (32, 0, 0, 0, 0x80000001)]),
    ([], []),                                                      # the empty profile
]


def _evs(fields):
    """An EV the profile expands, one with the bit after the consumed ones set, one with ev_t's last."""
    used = sum(bin(f[4]).count("1") for f in fields)
    valid = int("a5c396e15a3c69e1" * 4, 16) >> (256 - used) << (256 - used)     # bit 255: byte 0's bit 7
    return [format(ev, "064x") for ev in (valid, valid | 1 << (255 - used), valid | 1)]


def verdicts(tmp, source):
    """OCP's verdicts on ``CHECKS``: the driver built with the program and run on them."""
    (Path(tmp) / "harness.c").write_text(HARNESS)
    subprocess.run(["gcc", "-I", str(Path(source).parent), str(Path(tmp) / "harness.c"), "-o",
                    str(Path(tmp) / "harness")], check=True, capture_output=True)
    cases = [(fmts, fields, _evs(fields)) for fmts, fields in CHECKS]
    text = "".join(f"{len(fmts)} {len(fields)} {len(evs)} " + " ".join(map(str, fmts)) + " "
                   + " ".join(" ".join(f"{v:x}" if k else str(v) for k, v in enumerate(f)) for f in fields)
                   + " " + " ".join(evs) + "\n" for fmts, fields, evs in cases)
    out = subprocess.run([str(Path(tmp) / "harness")], input=text, check=True, capture_output=True,
                         text=True).stdout
    results, last = [], None
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("0x"):
            last = line[2:]
        elif line.startswith("profile "):
            fmts, fields, evs = cases[len(results)]
            results.append({"fmt_widths": fmts, "fields": [dict(zip(MEMBERS, f)) for f in fields],
                            "accepted": line.endswith("1"), "cases": []})
            last = None
        elif line.startswith("ev "):
            evs = cases[len(results) - 1][2]
            n = len(results[-1]["cases"])
            results[-1]["cases"].append({"ev": evs[n], "exp_ev": last if line.endswith("1") else None})
            last = None
    if len(results) != len(CHECKS):
        raise ValueError(f"the driver gave {len(results)} verdicts for {len(CHECKS)} profiles")
    return results


MEMBERS = ("width", "init_val", "min_val", "max_val", "mask")

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
        checks = verdicts(tmp, source)
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    profiles = parse(text)
    if len(profiles) != 10 or any(len(p["cases"]) != 8 for p in profiles):
        raise ValueError(f"expected 10 profiles of 8 cases, parsed {[len(p['cases']) for p in profiles]}")
    return {"repository": REPOSITORY, "commit": commit, "path": PATH, "blob": blob,
            "build": f"gcc ev_expansion.c -o ev_expansion ({gcc}); ./ev_expansion",
            "ev_t": "32 bytes as the program dumps them; bit 7 of byte 0 is the first bit",
            "profiles": profiles, "check_profs": checks}


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
