// Plain Verilator C++ harness: the speed limit for the benchmark (tools/bench.py).
// Streams the beats of a stimulus file into the `i` stream of the Verilated block as fast as the
// block accepts them, holds every output stream ready, and counts transfers and packets out.
// bench_config.h (written by tools/bench.py) defines IN_WORDS (32-bit words per input payload),
// IN_VALID/IN_READY/IN_PAYLOAD (the Verilated members of stream `i`) and OUTPUTS(X):
// X(valid, ready, payload, last_bit) for each output stream (last_bit < 0: a transfer is a packet).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "Vtop.h"
#include "bench_config.h"
#include "verilated.h"

template <typename T> static void set_words(T &port, const uint32_t *words) {
    if constexpr (sizeof(T) <= 8) {
        uint64_t value = words[0];
        if constexpr (IN_WORDS > 1) value |= uint64_t(words[1]) << 32;
        port = value;
    } else {
        for (int i = 0; i < IN_WORDS; i++) port[i] = words[i];
    }
}

template <typename T> static bool bit(const T &port, int index) {
    if constexpr (sizeof(T) <= 8) return (uint64_t(port) >> index) & 1;
    else return (port[index / 32] >> (index % 32)) & 1;
}

int main(int argc, char **argv) {
    if (argc < 2) { std::fprintf(stderr, "usage: %s STIMULUS\n", argv[0]); return 2; }
    std::ifstream file(argv[1], std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    std::vector<uint32_t> words(bytes.size() / 4);
    std::memcpy(words.data(), bytes.data(), words.size() * 4);
    const size_t beats = words.size() / IN_WORDS;

    auto *context = new VerilatedContext;
    auto *top = new Vtop{context};
    top->rst = 1;
    for (int i = 0; i < 2; i++) { top->clk = 0; top->eval(); top->clk = 1; top->eval(); }
    top->rst = 0;
#define READY(valid, ready, payload, last) top->ready = 1;
    OUTPUTS(READY)
    uint64_t transfers = 0, packets = 0, cycles = 0, idle = 0;
    size_t next = 0;
    auto start = std::chrono::steady_clock::now();
    while (idle < 64) {
        top->IN_VALID = next < beats;
        if (next < beats) set_words(top->IN_PAYLOAD, &words[next * IN_WORDS]);
        top->clk = 0;
        top->eval();
        bool accepted = top->IN_VALID && top->IN_READY;
        bool moved = accepted;
#define COUNT(valid, ready, payload, last)                                        \
        if (top->valid && top->ready) {                                           \
            transfers++; moved = true;                                            \
            if ((last) < 0 || bit(top->payload, (last))) packets++;               \
        }
        OUTPUTS(COUNT)
        top->clk = 1;
        top->eval();
        next += accepted;
        cycles++;
        idle = (next < beats || moved) ? 0 : idle + 1;
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("{\"cycles\": %llu, \"beats_in\": %zu, \"transfers_out\": %llu, \"packets_out\": %llu, "
                "\"seconds\": %.6f}\n", (unsigned long long)cycles, next, (unsigned long long)transfers,
                (unsigned long long)packets, seconds);
    top->final();
    delete top;
    delete context;
    return 0;
}
