#include "core/tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/dispatch.h"

namespace reforge {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    REFORGE_CHECK(d >= 0, "negative dimension ", d, " in shape ", shape_str(shape));
    if (d != 0 && n > (int64_t{1} << 62) / d) fail("shape ", shape_str(shape), " has too many elements");
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  REFORGE_CHECK(is_supported(dtype), "tensors of type ", dtype_name(dtype), " are not supported");
  Tensor t;
  t.dtype_ = dtype;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  size_t bytes = t.nbytes();
  size_t alloc = ((bytes + 63) / 64) * 64;
  if (alloc == 0) alloc = 64;
  void* p = std::aligned_alloc(64, alloc);
  if (!p) fail("out of memory allocating ", bytes, " bytes for tensor ", shape_str(t.shape_));
  std::memset(p, 0, alloc);
  t.owner_ = std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  t.data_ = p;
  return t;
}

Tensor Tensor::wrap(DType dtype, Shape shape, std::shared_ptr<const void> owner, const void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  t.owner_ = std::move(owner);
  t.data_ = data;
  return t;
}

Tensor Tensor::copy_of(DType dtype, Shape shape, const void* data) {
  Tensor t = empty(dtype, std::move(shape));
  if (t.nbytes()) std::memcpy(t.mutable_raw(), data, t.nbytes());
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  int64_t n = shape_numel(shape);
  REFORGE_CHECK(n == numel_, "cannot reshape ", describe(), " to ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::clone() const { return copy_of(dtype_, shape_, data_); }

double Tensor::as_double(int64_t i) const {
  REFORGE_CHECK(i >= 0 && i < numel_, "index ", i, " out of range for ", describe());
  return dispatch_all(dtype_, [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    return static_cast<double>(to_compute(data<T>()[i]));
  });
}

int64_t Tensor::as_int64(int64_t i) const {
  REFORGE_CHECK(i >= 0 && i < numel_, "index ", i, " out of range for ", describe());
  return dispatch_all(dtype_, [&](auto tag) -> int64_t {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
      return static_cast<int64_t>(static_cast<float>(data<T>()[i]));
    else
      return static_cast<int64_t>(data<T>()[i]);
  });
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[static_cast<size_t>(i)] = as_int64(i);
  return v;
}

std::string Tensor::describe() const { return dtype_name(dtype_) + shape_str(shape_); }

namespace {
template <typename To, typename From>
To convert_one(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    auto c = to_compute(v);
    return c != decltype(c)(0);
  } else if constexpr (std::is_same_v<To, float16> || std::is_same_v<To, bfloat16>) {
    if constexpr (std::is_same_v<From, double>) {
      // Round via float; double->float->half double-rounding is what numpy does too for casts.
      return To(static_cast<float>(v));
    } else {
      return To(static_cast<float>(to_compute(v)));
    }
  } else if constexpr (std::is_integral_v<To>) {
    auto c = to_compute(v);
    if constexpr (std::is_floating_point_v<decltype(c)>) {
      if (std::isnan(c)) return To(0);
      // Saturate like numpy on common platforms would be UB; clamp explicitly.
      long double x = std::trunc(static_cast<long double>(c));
      if (x <= static_cast<long double>(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
      if (x >= static_cast<long double>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
      return static_cast<To>(x);
    } else {
      return static_cast<To>(c);
    }
  } else {
    return static_cast<To>(to_compute(v));
  }
}
}  // namespace

Tensor cast_tensor(const Tensor& src, DType to) {
  if (src.dtype() == to) return src;
  Tensor out = Tensor::empty(to, src.shape());
  const int64_t n = src.numel();
  dispatch_all(src.dtype(), [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    dispatch_all(to, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      const From* s = src.data<From>();
      To* d = out.mutable_data<To>();
      for (int64_t i = 0; i < n; ++i) d[i] = convert_one<To>(s[i]);
    });
  });
  return out;
}

}  // namespace reforge
