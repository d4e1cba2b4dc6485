#include "backends/cpu/dnnl_matmul.h"

#include <cstring>

#include "backends/cpu/dnnl_context.h"
#include "core/error.h"

namespace reforge::cpu {

using dnnl_util::CachedPrimitive;
using dt = dnnl::memory::data_type;

namespace {

uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Descriptors for one operand: [rows, cols] of the logical matrix, stored transposed or not,
// with a leading batch dimension when the product is batched.
dnnl::memory::desc operand_md(int64_t batch, int64_t rows, int64_t cols, bool transposed, bool batched) {
  std::vector<int64_t> dims = {rows, cols};
  std::vector<int64_t> strides = transposed ? std::vector<int64_t>{1, rows} : std::vector<int64_t>{cols, 1};
  if (batched) {
    dims.insert(dims.begin(), batch);
    strides.insert(strides.begin(), rows * cols);
  }
  return dnnl_util::strided_md(dims, strides, dt::f32);
}

std::shared_ptr<const CachedPrimitive> build(const MatmulDims& d) {
  const bool batched = d.batch > 1;
  auto a_md = operand_md(d.a_broadcast ? 1 : d.batch, d.M, d.K, d.trans_a, batched);
  auto b_md = operand_md(d.b_broadcast ? 1 : d.batch, d.K, d.N, d.trans_b, batched);
  auto c_md = operand_md(d.batch, d.M, d.N, false, batched);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (d.alpha != 1.0f) attr.set_output_scales(0, {d.alpha});
  if (d.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(d.beta);
    attr.set_post_ops(ops);
  }
  try {
    dnnl::matmul::desc desc(a_md, b_md, c_md);
    dnnl::matmul::primitive_desc pd(desc, attr, dnnl_util::engine());
    auto p = std::make_shared<CachedPrimitive>();
    p->prim = dnnl::matmul(pd);
    p->scratchpad_md = pd.scratchpad_desc();
    p->scratchpad_bytes = p->scratchpad_md.get_size();
    return p;
  } catch (const dnnl::error&) {
    return nullptr;  // no implementation: the caller's reference loop takes over
  }
}

}  // namespace

bool dnnl_matmul_f32(const MatmulDims& d, const float* a, const float* b, float* c) {
  REFORGE_ASSERT(d.M > 0 && d.N > 0 && d.K > 0 && d.batch > 0);
  std::string key = "matmul_f32:" + dnnl_util::dims_key({d.batch, d.a_broadcast, d.b_broadcast, d.M, d.N, d.K,
                                                          d.trans_a, d.trans_b, float_bits(d.alpha),
                                                          float_bits(d.beta)});
  auto p = dnnl_util::cached_as<CachedPrimitive>(key, [&] { return build(d); });
  if (!p) return false;
  const bool batched = d.batch > 1;
  auto& eng = dnnl_util::engine();
  auto a_md = operand_md(d.a_broadcast ? 1 : d.batch, d.M, d.K, d.trans_a, batched);
  auto b_md = operand_md(d.b_broadcast ? 1 : d.batch, d.K, d.N, d.trans_b, batched);
  auto c_md = operand_md(d.batch, d.M, d.N, false, batched);
  dnnl_util::SerialIfSmall serial(static_cast<double>(d.batch) * d.M * d.N * d.K);
  dnnl_util::execute(*p,
                     {{DNNL_ARG_SRC, dnnl::memory(a_md, eng, const_cast<float*>(a))},
                      {DNNL_ARG_WEIGHTS, dnnl::memory(b_md, eng, const_cast<float*>(b))},
                      {DNNL_ARG_DST, dnnl::memory(c_md, eng, c)}},
                     "MatMul");
  return true;
}

}  // namespace reforge::cpu
