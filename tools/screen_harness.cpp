// Screening harness (tools/screening.py): the checked engine's wrapper (testbenches/checked.py) around a
// mutant schemata (tools/schemata.py), run once per mutant, each from the same power-up state.
//
// It does what checked.check does from cocotb, in C++: the wrapper in reset, its memories loaded from the
// .bin files of the working directory, then for each mutant-select value given on the command line a
// fork of that state (so no mutant sees the memories another left) sets `mutsel`, starts the run and
// waits for `done` (the wrapper stops at the first mismatch), then prints the outputs checked.verdict
// reads as one JSON line: {"mutsel": n, "seconds": s, "stopped": 0|1, "<port>": "<hex>", ...}; "stopped": an
// invariant of the design failed (its assertion's message, written by the simulation, comes before the
// line's JSON), which ends the run there. A child that dies (a crash, or SCREEN_TIMEOUT seconds) prints
// {"mutsel": n, "status": ...} instead.
// screen_config.h (written by tools/screening.py) defines CONTROLS(X), the 32-bit run inputs (values on
// stdin, one "name value" per line), and OUTPUTS(X), the outputs printed. One more stdin value, "hang F"
// (F > 0), lowers the limit of every run after the design's (mutant-select 0, run first) to F times the
// cycles the design took: a mutant that stalls stops there, not at the absolute limit; its line then has
// "limit": the cycles it was given.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <sys/mman.h>
#include <sys/wait.h>
#include <type_traits>
#include <unistd.h>

#include "Vtop.h"
#include "screen_config.h"
#include "verilated.h"

static const uint64_t NS = 1000;   // time steps per ns (--timescale 1ns/1ps)
static const unsigned SCREEN_TIMEOUT = 900;

template <typename T> static void hex(const T &value) {
    if constexpr (std::is_integral_v<T>) {
        std::printf("%llx", (unsigned long long)value);
    } else {
        for (int i = int(T::Words) - 1; i >= 0; i--) std::printf("%08x", value[i]);
    }
}

// Evaluate up to time `until` (every event before it), then stand at `until`.
static void settle(VerilatedContext *context, Vtop *top, uint64_t until) {
    top->eval();
    while (top->eventsPending() && top->nextTimeSlot() <= until) {
        context->time(top->nextTimeSlot());
        top->eval();
    }
    context->time(until);
}

int main(int argc, char **argv) {
    std::map<std::string, uint32_t> controls;
    std::string name;
    unsigned long value;
    while (std::cin >> name >> value) controls[name] = uint32_t(value);
    auto *context = new VerilatedContext;
    context->fatalOnError(false);     // a failed assertion stops the run (gotFinish), the harness reports it
    auto *top = new Vtop{context};
    top->start = 0;
    top->reset = 1;
    top->load = 0;
    top->mutsel = 0;
#define SET(port) top->port = controls.at(#port);
    CONTROLS(SET)
    settle(context, top, 2 * NS);
    top->load = 1;
    settle(context, top, 8 * NS);
    // the design's cycles, written by its run's child (a fork: shared memory, not a variable, carries it back)
    auto *design_cycles = static_cast<uint64_t *>(
        mmap(nullptr, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    *design_cycles = 0;
    const uint64_t hang = controls.count("hang") ? controls.at("hang") : 0;
    for (int arg = 1; arg < argc; arg++) {
        const long mutsel = std::strtol(argv[arg], nullptr, 10);
        std::fflush(stdout);
        const pid_t child = fork();
        if (child == 0) {
            alarm(SCREEN_TIMEOUT);
            const bool capped = mutsel != 0 && hang && *design_cycles
                                && hang * *design_cycles < uint64_t(top->limit);
            if (capped) top->limit = uint32_t(hang * *design_cycles);
            top->mutsel = mutsel;
            top->load = 0;
            top->reset = 0;
            settle(context, top, 9 * NS);
            top->start = 1;
            const auto start = std::chrono::steady_clock::now();
            top->eval();
            while (!top->done && !context->gotFinish() && top->eventsPending()) {
                context->time(top->nextTimeSlot());
                top->eval();
            }
            const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            if (mutsel == 0) *design_cycles = top->cycles;
            std::printf("{\"mutsel\": %ld, \"seconds\": %.6f, \"done\": %d, \"stopped\": %d", mutsel, seconds,
                        int(top->done), int(context->gotFinish()));
            if (capped) std::printf(", \"limit\": %u", unsigned(top->limit));
#define PRINT(port) std::printf(", \"" #port "\": \""); hex(top->port); std::printf("\"");
            OUTPUTS(PRINT)
            std::printf("}\n");
            std::fflush(stdout);
            _exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            std::printf("{\"mutsel\": %ld, \"status\": %d}\n", mutsel, status);
            std::fflush(stdout);
        }
    }
    delete top;
    delete context;
    return 0;
}
