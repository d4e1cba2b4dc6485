#include "ops/reforge/float16_weights.h"

#include "core/error.h"

namespace reforge::ops {

void refuse_float16_infinities(const std::string& where, const Tensor& w) {
  if (w.dtype() != DType::Float16 || !w.on_host()) return;
  const auto* h = static_cast<const uint16_t*>(w.raw());
  const int64_t n = w.numel();
  int64_t infs = 0;
  for (int64_t i = 0; i < n; ++i) infs += (h[i] & 0x7fffu) == 0x7c00u;
  if (infs) {
    int64_t first = 0;
    while ((h[first] & 0x7fffu) != 0x7c00u) ++first;
    fail(where, ": float16 weight ", w.describe(), " has ", infs, " infinite value(s) (first at element ", first,
         "): a float32 weight beyond float16's range (+-65504) was cast to float16; use --precision bf16 or fp32");
  }
}

}  // namespace reforge::ops
