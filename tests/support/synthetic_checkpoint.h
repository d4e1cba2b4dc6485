// Small synthetic weights and in-memory safetensors checkpoints, for binding and checkpoint
// refit tests that build their own graphs.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "refit/safetensors.h"

namespace reforge::test_support {

// Seeded float32 values in [-0.5, 0.5), all distinct in practice (a linear congruential stream).
inline Tensor random_f32(Shape shape, uint32_t seed) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  uint32_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    x = x * 1664525u + 1013904223u;
    t.mutable_data<float>()[i] = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
  }
  return t;
}

// `tensors` serialized as a safetensors file in memory and parsed back.
inline refit::Checkpoint checkpoint_of(const std::map<std::string, Tensor>& tensors) {
  auto owner = std::make_shared<std::string>(refit::serialize_safetensors(tensors));
  return refit::Checkpoint::parse(owner, owner->data(), owner->size(), "checkpoint 'synthetic'");
}

}  // namespace reforge::test_support
