#include "ops/quant/quant_common.h"

#include <cstring>

namespace reforge::ops::quant {

ScaleMap::ScaleMap(const Shape& x, const Shape& scale, int64_t axis, int64_t block_size, const std::string& where) {
  const int64_t rank = static_cast<int64_t>(x.size());
  const int64_t n = shape_numel(scale);
  if (block_size == 0 && n == 1 && scale.size() <= 1) return;  // per tensor
  REFORGE_CHECK(block_size >= 0, where, ": block_size must be >= 0, got ", block_size);
  REFORGE_CHECK(rank > 0 && axis >= -rank && axis < rank, where, ": axis ", axis, " is out of range for rank ", rank);
  if (axis < 0) axis += rank;
  per_tensor_ = false;
  dim_ = x[static_cast<size_t>(axis)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.size(); ++d) inner_ *= x[d];
  if (block_size == 0) {
    REFORGE_CHECK(scale.size() == 1 && scale[0] == dim_, where, ": a per-axis scale must be 1-D with ", dim_,
                  " elements (dimension ", axis, " of ", shape_str(x), "), got ", shape_str(scale));
    return;
  }
  block_ = block_size;
  blocks_ = (dim_ + block_size - 1) / block_size;
  bool ok = static_cast<int64_t>(scale.size()) == rank;
  for (int64_t d = 0; ok && d < rank; ++d)
    ok = scale[static_cast<size_t>(d)] == (d == axis ? blocks_ : x[static_cast<size_t>(d)]);
  REFORGE_CHECK(ok, where, ": a blocked scale for ", shape_str(x), " with axis ", axis, " and block_size ", block_size,
                " must have ", blocks_, " elements along the axis and x's other dimensions, got ", shape_str(scale));
}

std::vector<double> to_double_vector(const Tensor& t) {
  const Tensor d = cast_tensor(t, DType::Float64);
  const double* p = d.data<double>();
  return std::vector<double>(p, p + d.numel());
}

std::vector<int64_t> to_int64_values(const Tensor& t) {
  const Tensor d = cast_tensor(t, DType::Int64);
  const int64_t* p = d.data<int64_t>();
  return std::vector<int64_t>(p, p + d.numel());
}

bool quant_int_range(DType t, int64_t& lo, int64_t& hi) {
  switch (t) {
    case DType::UInt8:
      lo = 0, hi = 255;
      return true;
    case DType::Int8:
      lo = -128, hi = 127;
      return true;
    case DType::UInt16:
      lo = 0, hi = 65535;
      return true;
    case DType::Int16:
      lo = -32768, hi = 32767;
      return true;
    case DType::Int32:
      lo = INT32_MIN, hi = INT32_MAX;
      return true;
    case DType::UInt4:
      lo = 0, hi = 15;
      return true;
    case DType::Int4:
      lo = -8, hi = 7;
      return true;
    case DType::UInt2:
      lo = 0, hi = 3;
      return true;
    case DType::Int2:
      lo = -2, hi = 1;
      return true;
    default:
      return false;
  }
}

bool is_quant_float(DType t) {
  return t == DType::Float8E4M3FN || t == DType::Float8E4M3FNUZ || t == DType::Float8E5M2 ||
         t == DType::Float8E5M2FNUZ || t == DType::Float4E2M1;
}

Tensor int_tensor(const std::vector<int64_t>& v, DType to, const Shape& shape) {
  Tensor wide = Tensor::empty(DType::Int64, shape);
  if (!v.empty()) std::memcpy(wide.mutable_raw(), v.data(), v.size() * sizeof(int64_t));
  return cast_tensor(wide, to);
}

}  // namespace reforge::ops::quant
