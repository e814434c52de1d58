# innet: `make sim` sets everything up and runs the default simulation; `make test` runs the suite.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JOBS   ?= 2
export PATH := $(abspath $(VENV)/bin):$(PATH)

.PHONY: all setup sim test formal scenarios verilog report bench waves clean
all: sim

setup: $(STAMP)
$(STAMP): pyproject.toml tools/setup.sh
	tools/setup.sh $(VENV)
	touch $@

## Default simulation: Spillway under Verilator with randomized RoCEv2 traffic, waveform and pcaps kept.
sim: setup
	WAVES=1 $(PY) -m pytest testbenches/test_spill_buffer.py -k "random_traffic and flow"
	@echo "inspect: make waves SIGNALS='i__valid i__ready o__valid o__payload'"

## The whole suite: cocotb+Verilator testbenches, layout tests, formal proofs and scenarios.
test: setup
	$(PY) -m pytest -q -n $(JOBS) --dist loadgroup testbenches formal scenarios

formal: setup
	$(PY) -m pytest -q -n $(JOBS) formal

## System scenarios (RTL under Verilator checked against the golden models): CSV + PNG per scenario
scenarios: setup
	$(PY) -m pytest -v -n $(JOBS) --dist loadgroup scenarios
	@echo "results: build/scenarios/*.csv, build/scenarios/*.png"

verilog: setup
	$(PY) -m tools.emit build/verilog

## Synthesis resource report per block (Yosys): cells, flip-flops, memory bits -> build/report.csv
report: setup
	$(PY) -m tools.report

## Simulation throughput per block: C++ Verilator harness vs cocotb (batched, standard) vs pysim
bench: setup
	$(PY) -m tools.bench --packets $(or $(PACKETS),20000)

## make waves [VCD=path] SIGNALS='o__valid o__payload' [START=0 ROWS=50]
waves: setup
	$(PY) -m tools.waves $(VCD) $(SIGNALS) --start $(or $(START),0) --rows $(or $(ROWS),50)

clean:
	rm -rf build
