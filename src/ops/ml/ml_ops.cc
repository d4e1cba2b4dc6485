// The element-wise and selection ops of the ai.onnx.ml domain.
//
// Binarizer (ml opset 1+): y = x > threshold ? 1 : 0 in x's type (float, double, int32, int64),
// compared in double (a NaN gives 0).
//
// ArrayFeatureExtractor (ml opset 1+): selects positions of x's last axis by the int64 indices
// y (any shape; its elements in order): z = x[..., y], shape x.shape[:-1] + [numel(y)]; a 1-D x
// gives [1, numel(y)], as ONNX Runtime and the ONNX reference do. An index outside
// [0, last dimension) is an error.
//
// LabelEncoder (ml opset 2+, the keys_*/values_* form; opset 4 adds the tensor attributes and
// the int32/int16/double types): maps each element of x through parallel keys and values,
// elements without a key getting the default (default_tensor, default_float or default_int64 as
// the values' attribute says; -1 for integer values and -0.0 for float values when absent). The
// input has the keys' type, the output the values' type. Float keys compare by value (-0.0
// equals 0.0) and a NaN key matches every NaN; a repeated key maps to its last value. String
// keys, values or defaults are refused: reforge has no string tensors.
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dispatch.h"
#include "ops/ml/ml_common.h"
#include "ops/registry.h"

namespace reforge::ops::ml {
namespace {

const char* const kMl = "ai.onnx.ml";

// ---- Binarizer ------------------------------------------------------------------------------

void binarizer_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const double threshold = ctx.attr_float("threshold", 0.0f);
  const DType t = x.dtype();
  REFORGE_CHECK(t == DType::Float32 || t == DType::Float64 || t == DType::Int32 || t == DType::Int64, label,
                ": X must be float, double, int32 or int64, got ", x.describe());
  Tensor& y = ctx.allocate_output_uninit(0, t, x.shape());
  dispatch_all(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = y.mutable_data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) out[i] = static_cast<double>(in[i]) > threshold ? T(1) : T(0);
  });
}

// ---- ArrayFeatureExtractor ------------------------------------------------------------------

void array_feature_extractor_kernel(KernelContext& ctx) {
  const std::string label = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& y = ctx.input(1);
  REFORGE_CHECK(x.rank() >= 1, label, ": X must have rank 1 or more, got ", x.describe());
  REFORGE_CHECK(y.dtype() == DType::Int64, label, ": Y (the indices) must be int64, got ", y.describe());
  const int64_t last = x.dim(x.rank() - 1);
  const int64_t k = y.numel();
  const int64_t* idx = y.data<int64_t>();
  for (int64_t j = 0; j < k; ++j)
    REFORGE_CHECK(idx[j] >= 0 && idx[j] < last, label, ": index ", idx[j], " (element ", j,
                  " of Y) is outside the last axis of X ", x.describe());
  Shape shape = x.shape();
  shape.back() = k;
  if (x.rank() == 1) shape.insert(shape.begin(), 1);
  Tensor& z = ctx.allocate_output_uninit(0, x.dtype(), shape);
  const size_t es = dtype_size(x.dtype());
  const int64_t rows = last == 0 ? 0 : x.numel() / last;
  const auto* in = static_cast<const uint8_t*>(x.raw());
  auto* out = static_cast<uint8_t*>(z.mutable_raw());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j)
      std::memcpy(out + static_cast<size_t>(r * k + j) * es, in + static_cast<size_t>(r * last + idx[j]) * es, es);
}

// ---- LabelEncoder ---------------------------------------------------------------------------

bool label_type_ok(DType t) {
  return t == DType::Int64 || t == DType::Float32 || t == DType::Int32 || t == DType::Int16 || t == DType::Float64;
}

// Keys or values ("keys" / "values"): exactly one of <what>_floats, <what>_int64s,
// <what>_tensor (and no <what>_strings), as a 1-D tensor.
Tensor label_list(const ir::Node& node, const std::string& what) {
  const std::string label = node.label();
  REFORGE_CHECK(!node.has_attr(what + "_strings"), label, ": ", what,
                "_strings (string labels) is not supported: reforge has no string tensors");
  const bool f = node.has_attr(what + "_floats"), i = node.has_attr(what + "_int64s");
  const Tensor* t = node.attr_tensor(what + "_tensor");
  REFORGE_CHECK(int(f) + int(i) + int(t != nullptr) == 1, label, ": exactly one of ", what, "_floats, ", what,
                "_int64s, ", what, "_tensor must be set");
  if (f) {
    const std::vector<float> v = node.attr_floats(what + "_floats");
    return Tensor::copy_of(DType::Float32, {static_cast<int64_t>(v.size())}, v.data());
  }
  if (i) {
    const std::vector<int64_t> v = node.attr_ints(what + "_int64s");
    return Tensor::copy_of(DType::Int64, {static_cast<int64_t>(v.size())}, v.data());
  }
  REFORGE_CHECK(label_type_ok(t->dtype()), label, ": ", what, "_tensor is ", t->describe(),
                "; supported are int64, float, int32, int16 and double",
                t->dtype() == DType::String ? " (reforge has no string tensors)" : "");
  return t->reshaped({t->numel()});
}

// The value an unmatched element gets, as a one-element tensor of the values' type.
Tensor label_default(const ir::Node& node, const Tensor& values) {
  const std::string label = node.label();
  if (node.has_attr("values_tensor")) {
    if (const Tensor* d = node.attr_tensor("default_tensor")) {
      REFORGE_CHECK(d->numel() == 1 && d->dtype() == values.dtype(), label, ": default_tensor ", d->describe(),
                    " must hold one element of the values' type ", dtype_name(values.dtype()));
      return d->reshaped({});
    }
    return dispatch_all(values.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      return Tensor::scalar<T>(values.dtype(), static_cast<T>(is_float(values.dtype()) ? -0.0 : -1.0));
    });
  }
  if (values.dtype() == DType::Float32)
    return Tensor::scalar<float>(DType::Float32, node.attr_float("default_float", -0.0f));
  return Tensor::scalar<int64_t>(DType::Int64, node.attr_int("default_int64", -1));
}

std::string check_label_encoder(const ir::Node& node) {
  return reason_of(node, [&] {
    const Tensor keys = label_list(node, "keys");
    const Tensor values = label_list(node, "values");
    REFORGE_CHECK(keys.numel() == values.numel(), node.label(), ": keys (", keys.numel(), ") and values (",
                  values.numel(), ") differ in length");
    label_default(node, values);
  });
}

template <typename K, typename X>
void encode(const X* x, int64_t n, const std::unordered_map<K, int64_t>& map, int64_t nan_index, const Tensor& values,
            const Tensor& def, Tensor& y) {
  const size_t es = dtype_size(values.dtype());
  const auto* vals = static_cast<const uint8_t*>(values.raw());
  const auto* d = static_cast<const uint8_t*>(def.raw());
  auto* out = static_cast<uint8_t*>(y.mutable_raw());
  for (int64_t i = 0; i < n; ++i) {
    int64_t j = -1;
    if constexpr (std::is_floating_point_v<K>) {
      const K key = static_cast<K>(x[i]);
      if (std::isnan(key)) {
        j = nan_index;
      } else {
        auto it = map.find(key == 0 ? K(0) : key);
        if (it != map.end()) j = it->second;
      }
    } else {
      auto it = map.find(static_cast<K>(x[i]));
      if (it != map.end()) j = it->second;
    }
    std::memcpy(out + static_cast<size_t>(i) * es, j >= 0 ? vals + static_cast<size_t>(j) * es : d, es);
  }
}

void label_encoder_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  if (std::string why = check_label_encoder(node); !why.empty()) fail(label, ": ", why);
  const Tensor keys = label_list(node, "keys");
  const Tensor values = label_list(node, "values");
  const Tensor def = label_default(node, values);
  const Tensor& x = ctx.input(0);
  REFORGE_CHECK(x.dtype() == keys.dtype(), label, ": X is ", x.describe(), ", the keys are ", dtype_name(keys.dtype()));
  Tensor& y = ctx.allocate_output_uninit(0, values.dtype(), x.shape());
  if (is_float(keys.dtype())) {
    std::unordered_map<double, int64_t> map;
    int64_t nan_index = -1;
    for (int64_t i = 0; i < keys.numel(); ++i) {
      const double k = keys.as_double(i);
      if (std::isnan(k))
        nan_index = i;
      else
        map[k == 0 ? 0.0 : k] = i;
    }
    if (x.dtype() == DType::Float32)
      encode<double>(x.data<float>(), x.numel(), map, nan_index, values, def, y);
    else
      encode<double>(x.data<double>(), x.numel(), map, nan_index, values, def, y);
  } else {
    std::unordered_map<int64_t, int64_t> map;
    for (int64_t i = 0; i < keys.numel(); ++i) map[keys.as_int64(i)] = i;
    dispatch_all(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T>) encode<int64_t>(x.data<T>(), x.numel(), map, -1, values, def, y);
    });
  }
}

}  // namespace

DType label_encoder_value_type(const ir::Node& node) { return label_list(node, "values").dtype(); }
DType label_encoder_key_type(const ir::Node& node) { return label_list(node, "keys").dtype(); }

void register_ml_basic_ops(OpRegistry& r) {
  r.add({kMl, "Binarizer", 1, INT_MAX, binarizer_kernel, nullptr});
  r.add({kMl, "ArrayFeatureExtractor", 1, INT_MAX, array_feature_extractor_kernel, nullptr});
  r.add({kMl, "LabelEncoder", 2, INT_MAX, label_encoder_kernel, check_label_encoder});
}

}  // namespace reforge::ops::ml
