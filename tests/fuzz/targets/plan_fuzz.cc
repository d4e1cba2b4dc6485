// Plan reader: plan::parse_plan on the bytes, loading and hash-verifying every weight.
//
// The header and metadata checksums are rewritten to match the (mutated) bytes first: otherwise
// nearly every mutation stops at "checksum mismatch" and the metadata parser behind it is never
// reached — and a hostile file can carry valid checksums anyway (docs/plan-format.md).
#include <xxhash.h>

#include <cstring>
#include <memory>
#include <string>

#include "fuzz_target.h"
#include "plan/plan_io.h"

REFORGE_FUZZ_TARGET(plan) {
  auto owner = std::make_shared<std::string>(reinterpret_cast<const char*>(data), size);
  std::string& b = *owner;
  if (b.size() >= 64) {
    uint64_t meta_offset = 0, meta_size = 0;
    std::memcpy(&meta_offset, b.data() + 16, 8);
    std::memcpy(&meta_size, b.data() + 24, 8);
    if (meta_offset <= b.size() && meta_size <= b.size() - meta_offset) {
      uint64_t h = XXH3_64bits(b.data() + meta_offset, meta_size);
      std::memcpy(b.data() + 48, &h, 8);
    }
    uint64_t h = XXH3_64bits(b.data(), 56);
    std::memcpy(b.data() + 56, &h, 8);
  }
  try {
    reforge::plan::Plan p = reforge::plan::parse_plan(owner, owner->data(), owner->size());
    (void)p;
  } catch (const reforge::Error&) {
  }
  return 0;
}
