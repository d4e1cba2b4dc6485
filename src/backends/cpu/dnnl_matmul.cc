#include "backends/cpu/dnnl_matmul.h"

#include <omp.h>

#include <cstring>

#include "backends/cpu/dnnl_context.h"
#include "backends/cpu/gemv.h"
#include "core/error.h"
#include "core/thread_pool.h"

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
    p->make<dnnl::matmul>(pd);
    return p;
  } catch (const dnnl::error&) {
    return nullptr;  // no implementation: the caller's reference loop takes over
  }
}

}  // namespace

bool dnnl_matmul_f32(const MatmulDims& d, const float* a, const float* b, float* c) {
  REFORGE_ASSERT(d.M > 0 && d.N > 0 && d.K > 0 && d.batch > 0);
  // oneDNN fixes a primitive's thread count when it is made: make and run it under the same
  // limit, and key it by that limit.
  dnnl_util::SerialIfSmall serial(static_cast<double>(d.batch) * d.M * d.N * d.K);
  std::string key =
      "matmul_f32:" + dnnl_util::dims_key({d.batch, d.a_broadcast, d.b_broadcast, d.M, d.N, d.K, d.trans_a, d.trans_b,
                                           float_bits(d.alpha), float_bits(d.beta), omp_get_max_threads()});
  auto p = dnnl_util::cached_as<CachedPrimitive>(key, [&] { return build(d); });
  if (!p) return false;
  const bool batched = d.batch > 1;
  auto& eng = dnnl_util::engine();
  auto a_md = operand_md(d.a_broadcast ? 1 : d.batch, d.M, d.K, d.trans_a, batched);
  auto b_md = operand_md(d.b_broadcast ? 1 : d.batch, d.K, d.N, d.trans_b, batched);
  auto c_md = operand_md(d.batch, d.M, d.N, false, batched);
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
  dnnl::memory::desc md;               // the blocked layout oneDNN chose
  std::shared_ptr<const void> buffer;  // the packed copy, or the plain weights when they need none
  bool aliases_plain = false;
  std::string layout_key;  // identifies `md` in primitive cache keys
};

namespace {

// Thread buffers of the bfloat16 path: the split activations and the two partial products.
using dnnl_util::kBf16DstSlot;
using dnnl_util::kBf16SrcSlot;

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
    p->make<dnnl::matmul>(pd);
    return p;
  } catch (const dnnl::error&) {
    return nullptr;  // the packed layout does not suit these rows: the caller's plain path runs
  }
}

}  // namespace

namespace {

// The packed layout oneDNN picks for one weight shape and the reorder into it, made once per
// shape: creating them JIT-compiles code, far slower than re-packing a small matrix, and a refit
// re-packs every Linear weight inside its transaction.
struct Packer {
  dnnl::memory::desc plain_md, packed_md;
  dnnl::reorder reorder;
};

std::shared_ptr<const Packer> make_packer(int64_t K, int64_t N, bool transposed, dt wdt, int64_t rows) {
  try {
    auto p = std::make_shared<Packer>();
    auto a_md = dnnl_util::plain_md({rows, K}, wdt);
    auto c_md = dnnl_util::plain_md({rows, N}, dt::f32);
    dnnl::memory::desc any_md({K, N}, wdt, dnnl::memory::format_tag::any);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, any_md, c_md), dnnl_util::engine());
    p->packed_md = pd.weights_desc();
    p->plain_md =
        dnnl_util::strided_md({K, N}, transposed ? std::vector<int64_t>{1, K} : std::vector<int64_t>{N, 1}, wdt);
    p->reorder = dnnl::reorder(
        dnnl::reorder::primitive_desc(dnnl_util::engine(), p->plain_md, dnnl_util::engine(), p->packed_md));
    return p;
  } catch (const dnnl::error&) {
    return nullptr;  // no matmul for this type on this CPU: the caller keeps its plain path
  }
}

}  // namespace

std::shared_ptr<const PackedWeights> pack_weights(int64_t K, int64_t N, bool transposed, DType dtype, const void* w,
                                                  int64_t rows, std::shared_ptr<const void> owner) {
  REFORGE_ASSERT(K > 0 && N > 0 && rows > 0);
  if (dtype != DType::Float32 && dtype != DType::BFloat16) return nullptr;
  const dt wdt = dtype == DType::Float32 ? dt::f32 : dt::bf16;
  const std::string layout_key = std::string(wdt == dt::f32 ? "f32:" : "bf16:") + dnnl_util::dims_key({K, N, rows});
  // oneDNN fixes a primitive's thread count when it is made: make and run it under the same
  // limit, and key it by that limit.
  dnnl_util::SerialIfSmall serial(static_cast<double>(K) * N);  // small: waking threads costs more
  auto packer = dnnl_util::cached_as<Packer>(
      "matmul_pack:" + layout_key + (transposed ? ":t:" : ":") + std::to_string(omp_get_max_threads()),
      [&] { return make_packer(K, N, transposed, wdt, rows); });
  if (!packer) return nullptr;
  auto packed = std::make_shared<PackedWeights>();
  packed->K = K;
  packed->N = N;
  packed->wdt = wdt;
  packed->md = packer->packed_md;
  packed->layout_key = layout_key;
  if (owner && packer->packed_md == packer->plain_md) {
    packed->buffer = std::shared_ptr<const void>(std::move(owner), w);
    packed->aliases_plain = true;
    return packed;
  }
  const size_t bytes = packed->md.get_size();
  void* buf = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!buf) fail("out of memory packing a ", K, "x", N, " weight matrix (", bytes, " bytes)");
  packed->buffer = std::shared_ptr<const void>(buf, std::free);
  auto& eng = dnnl_util::engine();
  try {
    dnnl::memory src(packer->plain_md, eng, const_cast<void*>(w));
    dnnl::memory dst(packed->md, eng, buf);
    dnnl::stream& s = dnnl_util::stream();
    packer->reorder.execute(s, src, dst);
    s.wait();
  } catch (const dnnl::error& e) {
    fail("packing a ", K, "x", N, " weight matrix: oneDNN reorder failed: ", e.what());
  }
  return packed;
}

bool has_bf16_matmul() {
  static const bool has = make_packer(64, 64, false, dt::bf16, 64) != nullptr;
  return has;
}

bool packed_aliases_plain(const PackedWeights& w) { return w.aliases_plain; }

bool packed_layout_is_plain(const PackedWeights& w) {
  return w.md == dnnl_util::strided_md({w.K, w.N}, std::vector<int64_t>{w.N, 1}, w.wdt);
}

bool dnnl_matmul_packed(const PackedWeights& w, int64_t M, const float* a, const float* bias, float* c, bool round_a) {
  REFORGE_ASSERT(M > 0);
  // Made and run under the same thread limit (oneDNN fixes it at creation), keyed by it.
  dnnl_util::SerialIfSmall serial(static_cast<double>(M) * w.N * w.K);
  const std::string key =
      "matmul_packed:" + w.layout_key + ":" + std::to_string(M) + ":" + std::to_string(omp_get_max_threads());
  auto& eng = dnnl_util::engine();
  if (w.wdt == dt::f32 || round_a) {
    // float32 weights, or bfloat16 ones times A rounded to bfloat16: one product, bias fused.
    auto p = dnnl_util::cached_as<CachedPrimitive>(key + (bias ? ":bias" : ""),
                                                   [&] { return build_packed(w, M, bias != nullptr); });
    if (!p) return false;
    void* src = const_cast<float*>(a);
    if (round_a) {
      src = dnnl_util::thread_buffer(kBf16SrcSlot, static_cast<size_t>(M * w.K) * 4);
      if (w.wdt == dt::bf16)
        split_f32_to_bf16(a, static_cast<uint16_t*>(src), nullptr, M * w.K);
      else
        round_to_bf16(a, static_cast<float*>(src), M * w.K);
    }
    const auto c_md = dnnl_util::plain_md({M, w.N}, dt::f32);
    const auto a_md = dnnl_util::plain_md({M, w.K}, w.wdt);
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(a_md, eng, src)},
        {DNNL_ARG_WEIGHTS, dnnl::memory(w.md, eng, const_cast<void*>(w.buffer.get()))},
        {DNNL_ARG_DST, dnnl::memory(c_md, eng, c)}};
    if (bias)
      args.emplace(DNNL_ARG_BIAS, dnnl::memory(dnnl_util::plain_md({1, w.N}, dt::f32), eng, const_cast<float*>(bias)));
    dnnl_util::execute(*p, std::move(args), "MatMul");
    return true;
  }
  // bfloat16 weights: X = Xhi + Xlo in bfloat16 and one product of the stacked [Xhi; Xlo]
  // (2M rows: W streams once) into a scratch [Chi; Clo], then C = Chi + Clo (+ bias). Twice the
  // (AMX) arithmetic, but the activations keep float32 accuracy, as on the one-row path; only
  // the weights' rounding remains.
  auto stacked = dnnl_util::cached_as<CachedPrimitive>(
      "matmul_packed:" + w.layout_key + ":" + std::to_string(2 * M) + ":" + std::to_string(omp_get_max_threads()),
      [&] { return build_packed(w, 2 * M, false); });
  if (!stacked) return false;
  auto* hi = static_cast<uint16_t*>(dnnl_util::thread_buffer(kBf16SrcSlot, static_cast<size_t>(M * w.K) * 4));
  split_f32_to_bf16(a, hi, hi + M * w.K, M * w.K);
  auto* parts = static_cast<float*>(dnnl_util::thread_buffer(kBf16DstSlot, static_cast<size_t>(2 * M * w.N) * 4));
  dnnl_util::execute(*stacked,
                     {{DNNL_ARG_SRC, dnnl::memory(dnnl_util::plain_md({2 * M, w.K}, dt::bf16), eng, hi)},
                      {DNNL_ARG_WEIGHTS, dnnl::memory(w.md, eng, const_cast<void*>(w.buffer.get()))},
                      {DNNL_ARG_DST, dnnl::memory(dnnl_util::plain_md({2 * M, w.N}, dt::f32), eng, parts)}},
                     "MatMul");
  const float* lo_part = parts + M * w.N;
  const int64_t N = w.N;
  parallel_tasks(M, M * N > (1 << 16) ? omp_get_max_threads() : 1, [&](int64_t r) {
    float* cr = c + r * N;
    const float* h = parts + r * N;
    const float* l = lo_part + r * N;
    if (bias) {
      for (int64_t j = 0; j < N; ++j) cr[j] = (h[j] + l[j]) + bias[j];
    } else {
      for (int64_t j = 0; j < N; ++j) cr[j] = h[j] + l[j];
    }
  });
  return true;
}

}  // namespace reforge::cpu
