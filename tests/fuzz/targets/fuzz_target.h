// libFuzzer targets: one per parser of untrusted input (ONNX model, plan, safetensors checkpoint,
// shard index, .npy, bind file). Each target feeds the bytes to the real entry point; a
// reforge::Error is the expected answer to a malformed input and is caught here. Anything else
// (a crash, a sanitizer report, another exception, a leak) is a finding.
//
// The same sources build two ways: with -DREFORGE_FUZZ_REPLAY (reforge_tests, gcc, no libFuzzer)
// each target is the function reforge_fuzz_NAME, which tests/fuzz_replay_test.cc calls on every
// file of tests/fuzz/corpus/NAME/ and tests/fuzz/regressions/NAME/; otherwise (REFORGE_FUZZ=ON,
// clang) it is the fuzzer's LLVMFuzzerTestOneInput.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/error.h"

#ifdef REFORGE_FUZZ_REPLAY
#define REFORGE_FUZZ_TARGET(name) int reforge_fuzz_##name(const uint8_t* data, size_t size)
#else
#define REFORGE_FUZZ_TARGET(name) extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
#endif

namespace reforge::fuzz {

// Reads every byte of [p, p+n) so that ASan checks a parsed tensor's range really is readable.
inline void touch(const void* p, size_t n) {
  const volatile unsigned char* b = static_cast<const volatile unsigned char*>(p);
  unsigned char x = 0;
  for (size_t i = 0; i < n; ++i) x ^= b[i];
  (void)x;
}

// A rule that an input the reader accepted must satisfy, checked by the target itself: when it
// does not hold, the reader accepted a malformed input. The exception is not a reforge::Error, so
// a fuzz build reports it as a crash and the replay test as a failure.
inline void require(bool ok, const std::string& rule) {
  if (!ok) throw std::logic_error("accepted an input that breaks a rule: " + rule);
}

}  // namespace reforge::fuzz
