// Not part of the CMake build. Build and run (ASan + UBSan), from the repository root:
//   g++ -std=c++20 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -Isrc tests/fuzz/safetensors_fuzz.cc \
//       src/refit/safetensors.cc src/core/{tensor,dtype,mapped_file}.cc -o /tmp/st_fuzz && /tmp/st_fuzz models/gpt2/checkpoint_A.safetensors
// Mutation smoke test of the safetensors parser under ASan/UBSan: truncations and byte flips of
// a real checkpoint must end in an Error or a valid parse, never a crash.
#include <cstdio>
#include <fstream>
#include <random>
#include "refit/safetensors.h"
using namespace reforge;
int main(int argc, char** argv) {
  std::ifstream in(argv[1], std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::mt19937 rng(1);
  size_t ok = 0, err = 0;
  auto run = [&](std::string b) {
    auto owner = std::make_shared<std::string>(std::move(b));
    try { auto c = refit::Checkpoint::parse(owner, owner->data(), owner->size(), "f"); for (auto& [n, t] : c.tensors()) { volatile unsigned char x = t.nbytes() ? static_cast<const unsigned char*>(t.raw())[t.nbytes() - 1] : 0; (void)x; } ++ok; }
    catch (const Error&) { ++err; }
  };
  for (size_t n = 0; n <= std::min<size_t>(bytes.size(), 4000); ++n) run(bytes.substr(0, n));
  size_t hdr = 8 + (bytes.size() > 8 ? static_cast<unsigned char>(bytes[0]) + 256 * static_cast<unsigned char>(bytes[1]) : 0);
  for (int i = 0; i < 20000; ++i) {
    std::string b = bytes;
    for (int k = 0; k < 1 + int(rng() % 4); ++k) b[rng() % std::min(b.size(), hdr)] = "0123456789,:[]{}\"-eE. x"[rng() % 23];
    run(b);
  }
  std::printf("parsed %zu, errors %zu, no crash\n", ok, err);
}
