#include "core/nonfinite.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dispatch.h"

namespace reforge {

namespace {

// Exponent all ones: Inf or NaN. Counting matches in short chunks (the count fits in U)
// vectorizes where std::isfinite on each type, or an early exit, does not.
template <typename U>
int64_t first_nonfinite_bits(const U* p, int64_t n, U exp_mask) {
  constexpr int64_t kChunk = 1024;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t e = std::min(n, c + kChunk);
    U bad = 0;
    for (int64_t i = c; i < e; ++i) bad += static_cast<U>((p[i] & exp_mask) == exp_mask);
    if (bad)
      for (int64_t i = c; i < e; ++i)
        if ((p[i] & exp_mask) == exp_mask) return i;
  }
  return -1;
}

}  // namespace

int64_t first_nonfinite(DType dt, const void* p, int64_t n) {
  switch (dt) {
    case DType::Float32:
      return first_nonfinite_bits(static_cast<const uint32_t*>(p), n, uint32_t{0x7f800000});
    case DType::Float64:
      return first_nonfinite_bits(static_cast<const uint64_t*>(p), n, uint64_t{0x7ff0000000000000});
    case DType::Float16:
      return first_nonfinite_bits(static_cast<const uint16_t*>(p), n, uint16_t{0x7c00});
    case DType::BFloat16:
      return first_nonfinite_bits(static_cast<const uint16_t*>(p), n, uint16_t{0x7f80});
    default:
      return -1;
  }
}

int64_t first_nonfinite(const Tensor& t) {
  if (!is_float(t.dtype()) || t.numel() == 0) return -1;
  return first_nonfinite(t.dtype(), t.raw(), t.numel());
}

std::string nonfinite_str(const Tensor& t, int64_t i) {
  double v = dispatch_float(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return static_cast<double>(to_compute(t.data<T>()[i]));
  });
  return std::isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf";
}

std::string multi_index_str(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

std::string nonfinite_at(const Tensor& t, int64_t i) {
  return str_cat("holds ", nonfinite_str(t, i), " at index ", multi_index_str(t.shape(), i), " (flat index ", i, " of ",
                 t.describe(), ")");
}

void fail_refit_nonfinite(const std::string& what, const Tensor& t, int64_t i) {
  fail("refit: ", what, " ", nonfinite_at(t, i),
       "; refit refuses non-finite values (--allow-nonfinite accepts them; in Python allow_nonfinite=True)");
}

}  // namespace reforge
