// Shard index reader: refit::parse_shard_index on a model.safetensors.index.json's bytes.
#include "fuzz_target.h"
#include "refit/safetensors.h"

REFORGE_FUZZ_TARGET(shard_index) {
  try {
    auto files = reforge::refit::parse_shard_index(data, size, "fuzz index");
    (void)files;
  } catch (const reforge::Error&) {
  }
  return 0;
}
