// Proofs over the input facts a build infers (backends/backend.h: InputFacts), for the CUDA
// kernels' shape checks. A fact holds when it holds for every value the graph's symbolic sizes
// may take: a known number, or the same symbol on both sides (inference names two sizes computed
// the same way from the same symbols alike). Anything else is unproven, and the checks decline.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/error.h"

namespace reforge::cuda {

// True when `a` and `b` are equal whatever the symbols are.
inline bool same_dim(const ops::SymDim& a, const ops::SymDim& b) { return a == b; }
// True when `d` is the number `v`.
inline bool dim_is(const ops::SymDim& d, int64_t v) { return d.known() && d.value() == v; }

// Input `i`'s shape when its rank is known (its dimensions may be symbolic), else nullopt.
inline std::optional<ops::SymShape> shape_of(const backends::InputFacts& f, size_t i) {
  const ops::ValueType* t = f.type(i);
  if (!t || !t->rank_known) return std::nullopt;
  return t->shape;
}

// True when input `i` has provably one element (every dimension the number 1, or rank 0).
inline bool one_element(const backends::InputFacts& f, size_t i) {
  auto s = shape_of(f, i);
  if (!s) return false;
  for (const auto& d : *s)
    if (!dim_is(d, 1)) return false;
  return true;
}

// "input 4 float32[batch,1,seq,seq]" / "input 4 (shape not inferred)", for reasons.
inline std::string fact_str(const backends::InputFacts& f, size_t i, const std::string& name) {
  const ops::ValueType* t = f.type(i);
  return name + " " + (t ? t->str() : std::string("(type not inferred)"));
}

}  // namespace reforge::cuda
