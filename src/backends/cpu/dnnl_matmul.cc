#include "backends/cpu/dnnl_matmul.h"

#include <cstring>

#include "backends/cpu/dnnl_context.h"
#include "backends/cpu/gemv.h"
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

struct PackedWeights {
  int64_t K = 0, N = 0;
  dt wdt = dt::f32;
  dnnl::memory::desc md;  // the blocked layout oneDNN chose
  std::shared_ptr<void> buffer;
  std::string layout_key;  // identifies `md` in primitive cache keys
};

namespace {

// Where the bfloat16 copy of the activations goes (dnnl_conv uses the low slots).
constexpr int kBf16SrcSlot = 7;

std::shared_ptr<const CachedPrimitive> build_packed(const PackedWeights& w, int64_t M, bool bias) {
  const dt src_dt = w.wdt;
  auto a_md = dnnl_util::plain_md({M, w.K}, src_dt);
  auto c_md = dnnl_util::plain_md({M, w.N}, dt::f32);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  try {
    auto desc = bias ? dnnl::matmul::desc(a_md, w.md, dnnl_util::plain_md({1, w.N}, dt::f32), c_md)
                     : dnnl::matmul::desc(a_md, w.md, c_md);
    dnnl::matmul::primitive_desc pd(desc, attr, dnnl_util::engine());
    if (pd.weights_desc() != w.md) return nullptr;
    auto p = std::make_shared<CachedPrimitive>();
    p->prim = dnnl::matmul(pd);
    p->scratchpad_md = pd.scratchpad_desc();
    p->scratchpad_bytes = p->scratchpad_md.get_size();
    return p;
  } catch (const dnnl::error&) {
    return nullptr;  // the packed layout does not suit these rows: the caller's plain path runs
  }
}

}  // namespace

std::shared_ptr<const PackedWeights> pack_weights(int64_t K, int64_t N, bool transposed, DType dtype, const void* w,
                                                  int64_t rows) {
  REFORGE_ASSERT(K > 0 && N > 0 && rows > 0);
  if (dtype != DType::Float32 && dtype != DType::BFloat16) return nullptr;
  auto packed = std::make_shared<PackedWeights>();
  packed->K = K;
  packed->N = N;
  packed->wdt = dtype == DType::Float32 ? dt::f32 : dt::bf16;
  auto& eng = dnnl_util::engine();
  try {
    auto a_md = dnnl_util::plain_md({rows, K}, packed->wdt);
    auto c_md = dnnl_util::plain_md({rows, N}, dt::f32);
    dnnl::memory::desc any_md({K, N}, packed->wdt, dnnl::memory::format_tag::any);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, any_md, c_md), dnnl_util::engine());
    packed->md = pd.weights_desc();
    const size_t bytes = packed->md.get_size();
    void* buf = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!buf) fail("out of memory packing a ", K, "x", N, " weight matrix (", bytes, " bytes)");
    packed->buffer = std::shared_ptr<void>(buf, std::free);
    dnnl::memory plain(dnnl_util::strided_md({K, N}, transposed ? std::vector<int64_t>{1, K} : std::vector<int64_t>{N, 1},
                                              packed->wdt),
                       eng, const_cast<void*>(w));
    dnnl::stream& s = dnnl_util::stream();
    dnnl::memory dst(packed->md, eng, buf);
    dnnl::reorder(plain, dst).execute(s, plain, dst);
    s.wait();
  } catch (const dnnl::error&) {
    return nullptr;
  }
  packed->layout_key = std::string(packed->wdt == dt::f32 ? "f32:" : "bf16:") + dnnl_util::dims_key({K, N, rows});
  return packed;
}

bool dnnl_matmul_packed(const PackedWeights& w, int64_t M, const float* a, const float* bias, float* c) {
  REFORGE_ASSERT(M > 0);
  std::string key = "matmul_packed:" + w.layout_key + ":" + std::to_string(M) + (bias ? ":bias" : "");
  auto p = dnnl_util::cached_as<CachedPrimitive>(key, [&] { return build_packed(w, M, bias != nullptr); });
  if (!p) return false;
  auto& eng = dnnl_util::engine();
  const void* src = a;
  if (w.wdt == dt::bf16) {
    auto* a16 = static_cast<uint16_t*>(dnnl_util::thread_buffer(kBf16SrcSlot, static_cast<size_t>(M * w.K) * 2));
    convert_f32_to_bf16(a, a16, M * w.K);
    src = a16;
  }
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, dnnl::memory(dnnl_util::plain_md({M, w.K}, w.wdt), eng, const_cast<void*>(src))},
      {DNNL_ARG_WEIGHTS, dnnl::memory(w.md, eng, w.buffer.get())},
      {DNNL_ARG_DST, dnnl::memory(dnnl_util::plain_md({M, w.N}, dt::f32), eng, c)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(dnnl_util::plain_md({1, w.N}, dt::f32), eng, const_cast<float*>(bias)));
  dnnl_util::SerialIfSmall serial(static_cast<double>(M) * w.N * w.K);
  dnnl_util::execute(*p, std::move(args), "MatMul");
  return true;
}

}  // namespace reforge::cpu
