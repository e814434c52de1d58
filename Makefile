# innet: `make sim` sets everything up and runs the default simulation; `make test` runs the suite.
# Variables: JOBS (pytest-xdist workers, 0 = none; mutants: processes at a time instead), PYTEST_ARGS (passed to
# pytest, e.g. -k ...),
# BLOCKS (registered blocks for verilog/report/fpga/bench; default all), PACKETS, ENGINES (bench length and engines),
# SEEDS, FIRST, SHARD, TESTS (regress: seeds FIRST..FIRST+SEEDS-1, shard i/n of the sweep, test paths),
# BLOCK, N, MUTANT_ARGS (mutants: the block or all, how many mutants per block, more tools.mutants options;
# sim: the demonstration),
# NAME, TITLE (new-block: the block's module path and title; scenario, sweep: the scenario's name), ARGS (scenario: its
# options), GRID (sweep: KEY=V1,V2 ... of the scenario's options),
# CLUSTER, SCHEDULER, CLUSTER_OPTIONS (regress, mutants, sweep on a Dask cluster: local worker processes, JOBS of
# them, or slurm|lsf|pbs|sge batch jobs with dask-jobqueue's KEY=VALUE options; or a running scheduler tcp://HOST:8786).
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JOBS   ?= 2
PACKETS ?= 100000
ENGINES ?=
PYTEST_ARGS ?=
BLOCKS ?=
SEEDS  ?= 4
FIRST  ?= 1
SHARD  ?= 1/1
TESTS  ?=
BLOCK  ?=
N      ?=
MUTANT_ARGS ?=
ARGS   ?=
SCENARIOS ?= spillway symphony esa dblp sdr mrc
GRID   ?=
CLUSTER ?=
SCHEDULER ?=
CLUSTER_OPTIONS ?=
#: A campaign on a Dask cluster (tools.cluster): set by CLUSTER or SCHEDULER (sweep: a local cluster by default).
ENGINE_ARGS = --cluster $(or $(CLUSTER),local) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) --jobs $(JOBS) \
    $(foreach option,$(CLUSTER_OPTIONS),--cluster-option $(option))
export PATH := $(abspath $(VENV)/bin):$(PATH)

.PHONY: all setup sim test lint new-block formal formal-deep scenario scenarios sweep regress regress-merge mutants coverage verilog report fpga bench waves clean
all: sim

setup: $(STAMP)
$(STAMP): pyproject.toml tools/setup.sh
	tools/setup.sh $(VENV)
	touch $@

## A demonstration of a mechanism on its RTL (demos/): make sim [BLOCK=spillway|symphony|esa|mrc|dblp|sdr|list];
## the story of the run, its waveform window, its pcaps and the command that replays it.
sim: setup
	@$(PY) -m tools.sim $(BLOCK)

## The whole suite: lint, then cocotb+Verilator testbenches, layout tests, formal proofs and scenarios;
## make test BLOCK=name runs one block's tests (its testbench, proofs, soak, layout checks).
test: lint
	$(PY) -m pytest -q -n $(JOBS) --dist loadgroup --durations=25 tests testbenches formal scenarios \
	    $(if $(BLOCK),--block=$(BLOCK)) \
	    $(if $(PYTEST_ARGS),$(PYTEST_ARGS),--innet-replay='make test$(if $(BLOCK), BLOCK=$(BLOCK))')

## Style gate (ruff: pyflakes, pycodestyle, import order; config in pyproject.toml)
lint: setup
	$(VENV)/bin/ruff check .

## Formal proofs (SymbiYosys): the summary table (block, task, kind, mode, engine, depth, time, parameters,
## why a bmc run is bounded) -> build/formal/summary.csv; `python -m formal.summary --markdown` for the docs.
formal: setup
	$(PY) -m pytest -q -n $(JOBS) formal $(PYTEST_ARGS)

## The deep formal proofs (minutes each: @pytest.mark.deep, e.g. the spill node's drain-request response) alone
formal-deep: setup
	INNET_FORMAL_DEEP=1 $(PY) -m pytest -q -n $(JOBS) formal $(PYTEST_ARGS)

## One scenario on the golden models (python -m scenarios): make scenario NAME=spillway ARGS='--hosts 16'
## -> build/scenarios/NAME.csv, .png, .txt (the summary); ARGS=--help lists its settings
scenario: setup
	@$(PY) -m scenarios $(NAME) $(ARGS)

## Every scenario (SCENARIOS, default all) at its default settings, then the results table (tools.scenario_table)
scenarios: setup
	@for name in $(SCENARIOS); do $(PY) -m scenarios $$name || exit 1; done
	$(PY) -m tools.scenario_table

## One scenario over a grid of its options on a Dask cluster: make sweep NAME=esa GRID='slots=4,8 jobs=2,4' [CLUSTER=...]
## -> build/sweeps/NAME.csv (each point's rows, its values in front)
sweep: setup
	$(PY) -m tools.cluster sweep $(NAME) $(foreach axis,$(GRID),--grid $(axis)) $(ENGINE_ARGS)

## Seed sweep of the randomized testbenches, shard SHARD=i/n -> build/regress/shard-<i>-of-<n>.xml (JUnit);
## with CLUSTER=local|slurm|... or SCHEDULER=tcp://... one unit per test file and seed on a Dask cluster
## -> build/regress/report.xml
regress: setup
ifneq ($(CLUSTER)$(SCHEDULER),)
	$(PY) -m tools.cluster regress --seeds $(SEEDS) --first $(FIRST) $(ENGINE_ARGS) $(if $(TESTS),--tests $(TESTS))
else
	$(PY) -m tools.regress --seeds $(SEEDS) --first $(FIRST) --shard $(SHARD) --jobs $(JOBS) $(if $(TESTS),--tests $(TESTS))
endif

## Merge every shard's JUnit file -> build/regress/report.xml, failures with their replay command
regress-merge: setup
	$(PY) -m tools.regress --merge build/regress/shard-*.xml

## Code coverage (Verilator line/branch/toggle) of the testbenches, mapped to the Amaranth source -> build/coverage/
coverage: setup
	$(if $(BLOCKS),@$(PY) -m tools.blocks --check $(BLOCKS) >/dev/null)
	INNET_COVERAGE=1 $(PY) -m pytest -q -n $(JOBS) --dist loadgroup \
	    $(if $(BLOCKS),$(shell $(PY) -m tools.blocks --check $(BLOCKS) 2>/dev/null),testbenches $(foreach t,readme cli layout mutants,--ignore=testbenches/test_$(t).py)) $(PYTEST_ARGS)
	$(PY) -m tools.coverage $(BLOCKS)

## Mutation run: N mutants (default all) of BLOCK's (default spillway.switch; or all blocks') RTL sources:
## screening on one C++ build, then the survivors against its tests and proofs, then the equivalence miter
## -> build/mutants/; with CLUSTER=... or SCHEDULER=... one unit per mutant on a Dask cluster
mutants: setup
ifneq ($(CLUSTER)$(SCHEDULER),)
	$(PY) -m tools.cluster mutants $(or $(BLOCK),spillway.switch) $(if $(N),--n $(N)) $(ENGINE_ARGS) $(MUTANT_ARGS)
else
	$(PY) -m tools.mutants $(or $(BLOCK),spillway.switch) $(if $(N),--n $(N)) --jobs $(JOBS) $(MUTANT_ARGS)
endif

## A new block from the scaffold (tools/scaffold/): its Component, model, lockstep test and proof, registered
new-block: setup
	$(PY) -m tools.new_block $(NAME) $(if $(TITLE),--title "$(TITLE)")

## Verilog of the registered blocks (default parameters) -> build/verilog/<block>.v
verilog: setup
	$(PY) -m tools.emit -o build/verilog $(BLOCKS)

## Synthesis resource report per block (Yosys): cells, flip-flops, memory bits -> build/report.csv
report: setup
	$(PY) -m tools.report $(BLOCKS)

## Timing on a real FPGA: out-of-context synthesis, place and route per block (ECP5-85k, speed 8, goal 125 MHz;
## tools/fpga.toml: parameters that fit, distributed-RAM memories, reasons) -> build/fpga/fpga.csv
fpga: setup
	$(PY) -m tools.fpga $(BLOCKS)

## Simulation throughput per block: C++ Verilator harness vs cocotb (replay, batched, standard) vs pysim
bench: setup
	$(PY) -m tools.bench --packets $(PACKETS) $(if $(ENGINES),--engines $(ENGINES)) $(BLOCKS)

## make waves [DUMP=path.vcd|.fst] SIGNALS='o__valid o__payload' [START=0 ROWS=50] [SVG=out.svg: timing diagram]
waves: setup
	$(PY) -m tools.waves $(DUMP) $(SIGNALS) --start $(or $(START),0) --rows $(or $(ROWS),50) $(if $(SVG),--svg $(SVG))

clean:
	rm -rf build
