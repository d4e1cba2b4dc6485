// Kernel tests of the CUDA backend: a one-node graph run on "cuda" and on "cpu" with the same
// inputs, held to a normalized mean squared error (sum (a-b)^2 / sum b^2) of 1e-7 in float32 and
// float64, 1e-4 in 16-bit floats, and to equality for integer and bool results (test-backend-ops
// style). REQUIRE_GPU() skips a test, with the reason, where no GPU can run it.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "support/engine_for.h"
#include "support/make_tensor.h"

namespace reforge::test_support {

#ifdef REFORGE_HAVE_CUDA
inline constexpr bool kBuiltWithCuda = true;
#else
inline constexpr bool kBuiltWithCuda = false;
#endif

// Why the CUDA kernels cannot run here, or "".
inline std::string no_gpu() {
  if (!kBuiltWithCuda) return "reforge is built without CUDA";
  const backends::Backend* b = backends::find_backend("cuda");
  if (!b) return "no cuda backend registered";
  return b->unavailable ? b->unavailable() : "";
}

#define REQUIRE_CUDA_BUILD() \
  if (!::reforge::test_support::kBuiltWithCuda) GTEST_SKIP() << "reforge is built without CUDA"
#define REQUIRE_GPU() \
  if (std::string why = ::reforge::test_support::no_gpu(); !why.empty()) GTEST_SKIP() << why

// Random values of `dtype`: floats uniform in [lo, hi); integers the same rounded after scaling by
// 4 (small, both signs; unsigned types clamp at 0); bool: above zero.
inline Tensor random_of(DType dtype, const Shape& shape, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  Tensor f = random_floats(shape, seed, lo, hi);
  if (dtype == DType::Float32) return f;
  if (dtype == DType::Bool) {
    Tensor t = Tensor::empty(DType::Bool, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<uint8_t>()[i] = f.data<float>()[i] > 0 ? 1 : 0;
    return t;
  }
  if (dtype != DType::Float16 && dtype != DType::BFloat16 && dtype != DType::Float64) {
    Tensor t = Tensor::empty(DType::Float32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = std::round(f.data<float>()[i] * 4.0f);
    return cast_tensor(t, dtype);
  }
  return cast_tensor(f, dtype);
}

// NMSE of `got` against `want` (read as float64 on the host); NaN where both are NaN is equal.
inline double nmse(const Tensor& got, const Tensor& want) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = got.as_double(i), b = want.as_double(i);
    if (std::isnan(b) && std::isnan(a)) continue;
    if (std::isinf(b) && a == b) continue;
    num += (a - b) * (a - b);
    den += b * b;
  }
  return den == 0 ? num : num / den;
}

inline ir::ValueInfo value_info(const std::string& name, DType dtype, const Shape& dims) {
  ir::ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.has_shape = true;
  for (int64_t d : dims) v.shape.push_back(ir::Dim{d, ""});
  return v;
}

// An ONNX node (opset 17) named after its one output.
inline ir::Node node(const std::string& name, const std::string& type, std::vector<std::string> ins,
                     std::map<std::string, ir::Attribute> attrs = {}) {
  ir::Node n;
  n.name = name;
  n.op_type = type;
  n.opset = 17;
  n.inputs = std::move(ins);
  n.outputs = {name};
  n.attrs = std::move(attrs);
  return n;
}

// Runs node `n` on cuda and on cpu and compares every output. `inputs[i]` feeds n.inputs[i]
// (absent optional inputs: empty name, any tensor). Inputs named in `constants` become
// initializers (weights, structure inputs such as Reshape's shape); the rest graph inputs.
inline void expect_same_on_cuda(const ir::Node& n, const std::vector<Tensor>& inputs, const std::string& what,
                                std::vector<std::string> constants = {}) {
  ir::Graph g;
  g.name = what;
  g.ir_version = 10;
  g.opsets[n.domain] = n.opset;
  if (!n.domain.empty()) g.opsets[""] = 17;
  std::map<std::string, Tensor> feed;
  for (size_t i = 0; i < n.inputs.size() && i < inputs.size(); ++i) {
    if (n.inputs[i].empty()) continue;
    bool constant = false;
    for (const auto& c : constants) constant |= c == n.inputs[i];
    if (constant) {
      g.initializers[n.inputs[i]] = inputs[i];
    } else if (!feed.count(n.inputs[i])) {
      g.inputs.push_back(value_info(n.inputs[i], inputs[i].dtype(), inputs[i].shape()));
      feed[n.inputs[i]] = inputs[i];
    }
  }
  g.nodes.push_back(n);
  for (const auto& o : n.outputs) {
    if (o.empty()) continue;
    ir::ValueInfo v;
    v.name = o;
    g.outputs.push_back(v);
  }
  std::vector<Tensor> want, got;
  try {
    want = engine_for(g).run(feed);
  } catch (const Error& e) {
    FAIL() << what << ": the CPU run failed: " << e.what();
  }
  try {
    got = engine_for(g, {}, "cuda").run(feed);
  } catch (const Error& e) {
    FAIL() << what << ": the CUDA run failed: " << e.what();
  }
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_TRUE(got[k].on_host()) << what;
    ASSERT_EQ(got[k].dtype(), want[k].dtype()) << what << " output " << k;
    ASSERT_EQ(got[k].shape(), want[k].shape()) << what << " output " << k;
    const DType t = want[k].dtype();
    if (t == DType::Float32 || t == DType::Float64) {
      EXPECT_LE(nmse(got[k], want[k]), 1e-7) << what << " output " << k;
    } else if (t == DType::Float16 || t == DType::BFloat16) {
      EXPECT_LE(nmse(got[k], want[k]), 1e-4) << what << " output " << k;
    } else {
      for (int64_t i = 0; i < want[k].numel(); ++i)
        ASSERT_EQ(got[k].as_int64(i), want[k].as_int64(i)) << what << " output " << k << " element " << i;
    }
  }
}

}  // namespace reforge::test_support
