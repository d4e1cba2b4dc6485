#include "backends/cpu/dnnl_conv.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>

#include "backends/cpu/dnnl_context.h"
#include "core/error.h"

namespace reforge::cpu {

using dnnl_util::CachedPrimitive;
using dt = dnnl::memory::data_type;

namespace {

// The convolution lets oneDNN pick its preferred (usually channel-blocked) layouts; ONNX
// tensors are plain NCHW, so each operand whose chosen layout differs is reordered into a
// per-thread buffer before the run (and the result reordered back). Weights are reordered once
// per weight set when the caller passes a ConvWeightCache (the Conv op's prepared state), else on
// every call: caching them by address would go stale if a caller rewrote a wrapped buffer.
}  // namespace

struct ConvPrimitive : CachedPrimitive {
  dnnl::memory::desc src_plain, weights_plain, bias_md, dst_plain, sum_plain;  // the caller's layouts
  dnnl::memory::desc src_md, weights_md, dst_md;                               // the layouts the convolution runs in
  std::optional<CachedPrimitive> src_reorder, weights_reorder, dst_reorder;
  std::optional<CachedPrimitive> sum_reorder;  // residual (caller's layout) into dst's layout
  double work = 0;                             // multiply-adds per run (SerialIfSmall)
  uint64_t id = 0;                             // unique per primitive ever built (never reused)
};

namespace {

// Grouped weights are [G, OC/G, C/G, kernel...] to oneDNN: the same bytes as ONNX's layout.
std::vector<int64_t> weight_dims(const ConvDims& d) {
  if (d.group == 1) return d.weights;
  std::vector<int64_t> w = d.weights;
  w[0] /= d.group;
  w.insert(w.begin(), d.group);
  return w;
}

dnnl::memory::desc any_md(const std::vector<int64_t>& dims) {
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), dt::f32, dnnl::memory::format_tag::any);
}

std::optional<CachedPrimitive> make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
  if (from == to) return std::nullopt;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::reorder::primitive_desc pd(dnnl_util::engine(), from, dnnl_util::engine(), to, attr);
  CachedPrimitive r;
  r.make<dnnl::reorder>(pd);
  return r;
}

// The caller's layout of an activation (see ActLayout).
dnnl::memory::desc user_md(const std::vector<int64_t>& dims, ActLayout layout) {
  using tag = dnnl::memory::format_tag;
  if (dims.size() != 4 || layout == ActLayout::Nchw) return dnnl_util::plain_md(dims, dt::f32);
  const dnnl::memory::dims md(dims.begin(), dims.end());
  if (layout == ActLayout::Nhwc) return dnnl::memory::desc(md, dt::f32, tag::nhwc);
  const int64_t b = activation_block();
  return dnnl::memory::desc(md, dt::f32, b == 16 ? tag::nChw16c : b == 8 ? tag::nChw8c : tag::nchw);
}

std::shared_ptr<const ConvPrimitive> build(const ConvDims& d, const ConvPostOps& post, bool packed) {
  static std::atomic<uint64_t> next_id{0};
  auto p = std::make_shared<ConvPrimitive>();
  p->id = ++next_id;
  p->src_plain = user_md(d.src, d.src_layout);
  p->weights_plain = dnnl_util::plain_md(weight_dims(d), dt::f32);
  p->bias_md = d.has_bias ? dnnl_util::plain_md({d.weights[0]}, dt::f32) : dnnl::memory::desc();
  p->dst_plain = user_md(d.dst, d.dst_layout);
  p->sum_plain = user_md(d.dst, d.sum_layout);
  dnnl::memory::dims strides(d.strides.begin(), d.strides.end());
  dnnl::memory::dims dil, pl(d.pad_begin.begin(), d.pad_begin.end()), pr(d.pad_end.begin(), d.pad_end.end());
  for (int64_t v : d.dilations) dil.push_back(v - 1);  // oneDNN counts the gaps
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (post.sum || post.relu) {
    dnnl::post_ops po;
    if (post.sum) po.append_sum(1.0f);
    if (post.relu) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(po);
  }
  try {
    // Blocked layouts pay for reorders of the activations and, unless the weights are packed
    // once (a ConvWeightCache), of the weights on every call. When those bytes dominate and
    // there is little arithmetic per byte (a deep layer on a small image without packed
    // weights), the plain-layout GEMM-based kernel is faster. Depthwise and grouped
    // convolutions always want blocked layouts.
    int64_t elems = 0, flops = 2;
    for (const auto* v : {&d.src, &d.weights, &d.dst}) {
      if (packed && v == &d.weights) continue;
      int64_t n = 1;
      for (int64_t x : *v) n *= x;
      elems += n;
    }
    for (size_t i = 1; i < d.weights.size(); ++i) flops *= d.weights[i];
    for (int64_t x : d.dst) flops *= x;
    const bool plain =
        d.group == 1 && flops < 150 * elems && d.src_layout == ActLayout::Nchw && d.dst_layout == ActLayout::Nchw;
    dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                         plain ? p->src_plain : any_md(d.src),
                                         plain ? p->weights_plain : any_md(weight_dims(d)), p->bias_md,
                                         plain ? p->dst_plain : any_md(d.dst), strides, dil, pl, pr);
    // Winograd F(4x4, 3x3) (oneDNN's jit_wino_4x3, AVX-512) does the 3x3 stride-1 layers with
    // about half the multiplies. Its weight transform is a reorder, so it only pays with packed
    // weights. Measured on ResNet-50 at one thread: batch 8 ~15% less CPU time, batch 1 even;
    // its logits are as close to PyTorch's as the direct kernels' (max abs diff 1.05e-5 vs
    // 1.14e-5). Where oneDNN has no Winograd kernel (other ISA, shapes) the direct one runs.
    std::optional<dnnl::convolution_forward::primitive_desc> wino;
    // Small layers (fewer than 64 input or output channels) lose to the direct kernel: the
    // tiny test CNN (16/32 channels, 32x32) ran 0.195 ms with Winograd and 0.150 ms without,
    // while ResNet-50 (64+ channels) is unchanged.
    const bool wino_shape = packed && d.group == 1 && d.weights.size() == 4 && d.weights[0] >= 64 &&
                            d.weights[1] >= 64 && d.weights[2] == 3 && d.weights[3] == 3 &&
                            d.strides == std::vector<int64_t>{1, 1} && d.dilations == std::vector<int64_t>{1, 1};
    if (wino_shape) {
      try {
        dnnl::convolution_forward::desc wdesc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd,
                                              any_md(d.src), any_md(weight_dims(d)), p->bias_md, any_md(d.dst), strides,
                                              dil, pl, pr);
        wino.emplace(wdesc, attr, dnnl_util::engine());
      } catch (const dnnl::error&) {
        wino.reset();
      }
    }
    dnnl::convolution_forward::primitive_desc pd =
        wino ? *wino : dnnl::convolution_forward::primitive_desc(desc, attr, dnnl_util::engine());
    p->make<dnnl::convolution_forward>(pd);
    p->src_md = pd.src_desc();
    p->weights_md = pd.weights_desc();
    p->dst_md = pd.dst_desc();
    p->src_reorder = make_reorder(p->src_plain, p->src_md);
    p->weights_reorder = make_reorder(p->weights_plain, p->weights_md);
    p->dst_reorder = make_reorder(p->dst_md, p->dst_plain);
    if (post.sum) p->sum_reorder = make_reorder(p->sum_plain, p->dst_md);
    p->work = 1;
    for (auto v : d.dst) p->work *= static_cast<double>(v);
    for (size_t i = 1; i < d.weights.size(); ++i) p->work *= static_cast<double>(d.weights[i]);
    return p;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

// Memory for `md`: the caller's plain buffer when no reorder is needed, else a thread buffer.
dnnl::memory staged(const dnnl::memory::desc& md, int slot) {
  return dnnl::memory(md, dnnl_util::engine(), dnnl_util::thread_buffer(slot, md.get_size()));
}

}  // namespace

class ConvWeightCache {
 public:
  // The weights in `p`'s layout, reordered from `plain` on first use. Primitives that want the
  // same layout (the same layer at another batch size, as a rule) share one copy. The returned
  // buffer lives as long as the cache.
  void* get(const ConvPrimitive& p, const float* plain) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [md, buf] : packs_)
      if (md == p.weights_md) return buf.get();
    const size_t bytes = p.weights_md.get_size();
    std::shared_ptr<void> buf(std::aligned_alloc(64, (bytes + 63) / 64 * 64), std::free);
    if (!buf) throw std::bad_alloc();
    auto& eng = dnnl_util::engine();
    dnnl::memory from(p.weights_plain, eng, const_cast<float*>(plain));
    dnnl::memory to(p.weights_md, eng, buf.get());
    dnnl_util::execute(*p.weights_reorder, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}, "Conv (weight packing)");
    packs_.emplace_back(p.weights_md, buf);
    return buf.get();
  }

  // The node's own memo of its primitives, so that a steady run skips building the string key
  // of the process-wide cache (a few microseconds per call: much of a small layer's time).
  std::shared_ptr<const ConvPrimitive> find(const ConvDims& d, bool sum, bool relu) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : prims_)
      if (e.sum == sum && e.relu == relu && e.dims == d) return e.prim;
    return nullptr;
  }
  void remember(const ConvDims& d, bool sum, bool relu, std::shared_ptr<const ConvPrimitive> p) {
    std::lock_guard<std::mutex> lock(mu_);
    if (prims_.size() >= 8) prims_.erase(prims_.begin());  // shapes that keep changing: bounded
    prims_.push_back({d, sum, relu, std::move(p)});
  }

 private:
  struct Memo {
    ConvDims dims;
    bool sum, relu;
    std::shared_ptr<const ConvPrimitive> prim;
  };
  std::mutex mu_;
  std::vector<std::pair<dnnl::memory::desc, std::shared_ptr<void>>> packs_;
  std::vector<Memo> prims_;
};

std::shared_ptr<ConvWeightCache> make_conv_weight_cache() { return std::make_shared<ConvWeightCache>(); }

namespace {

struct Native {
  ActLayout layout = ActLayout::Nchw;
  int64_t block = 1;
};

const Native& native() {
  static const Native n = [] {
    Native r;
    try {
      // A typical ResNet layer: 64 -> 64 channels, 3x3, 28x28.
      const std::vector<int64_t> act = {1, 64, 28, 28}, w = {64, 64, 3, 3};
      dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                           any_md(act), any_md(w), dnnl::memory::desc(), any_md(act), {1, 1}, {0, 0},
                                           {1, 1}, {1, 1});
      dnnl::convolution_forward::primitive_desc pd(desc, dnnl_util::engine());
      const dnnl::memory::dims dims(act.begin(), act.end());
      using tag = dnnl::memory::format_tag;
      const dnnl::memory::desc got = pd.dst_desc();
      if (got == dnnl::memory::desc(dims, dt::f32, tag::nChw16c))
        r = {ActLayout::Blocked, 16};
      else if (got == dnnl::memory::desc(dims, dt::f32, tag::nChw8c))
        r = {ActLayout::Blocked, 8};
      else if (got == dnnl::memory::desc(dims, dt::f32, tag::nhwc))
        r = {ActLayout::Nhwc, 1};
    } catch (const dnnl::error&) {
    }
    return r;
  }();
  return n;
}

}  // namespace

ActLayout native_layout() { return native().layout; }
int64_t activation_block() { return native().block; }

ConvHandle dnnl_conv_primitive(const ConvDims& d, const ConvPostOps& post, ConvWeightCache* packed) {
  std::shared_ptr<const ConvPrimitive> p = packed ? packed->find(d, post.sum != nullptr, post.relu) : nullptr;
  if (!p) {
    auto layout = [](ActLayout l) { return l == ActLayout::Nhwc ? "h" : l == ActLayout::Blocked ? "c" : "p"; };
    std::string key = "conv_f32:" + dnnl_util::dims_key(d.src) + ":" + dnnl_util::dims_key(d.weights) + ":" +
                      dnnl_util::dims_key(d.dst) + ":" + std::to_string(d.group) + ":" +
                      dnnl_util::dims_key(d.strides) + ":" + dnnl_util::dims_key(d.dilations) + ":" +
                      dnnl_util::dims_key(d.pad_begin) + ":" + dnnl_util::dims_key(d.pad_end) + ":" +
                      (d.has_bias ? "b" : "") + (post.sum ? ":sum" : "") + (post.relu ? ":relu" : "") +
                      (packed ? ":packed" : "") + ":" + layout(d.src_layout) + layout(d.dst_layout) +
                      layout(d.sum_layout);
    p = dnnl_util::cached_as<ConvPrimitive>(key, [&] { return build(d, post, packed != nullptr); });
    if (packed && p) packed->remember(d, post.sum != nullptr, post.relu, p);
  }
  return p;
}

bool dnnl_conv_f32(const ConvDims& d, const float* src, const float* weights, const float* bias, float* dst,
                   const ConvPostOps& post, ConvWeightCache* packed) {
  const ConvHandle p = dnnl_conv_primitive(d, post, packed);
  if (!p) return false;
  dnnl_conv_execute(*p, d, src, weights, bias, dst, post, packed);
  return true;
}

namespace {

// The memory objects of one primitive's run on this thread, kept between runs: a steady run of
// a chain of convolutions (no reorders, packed weights) only points them at its buffers, where
// making them anew costs a dozen small allocations per call, a visible share of a small layer.

struct ThreadArgs {
  uint64_t id = 0;  // the primitive's id; 0 = empty
  dnnl::memory src, weights, bias, dst, scratch;
  std::unordered_map<int, dnnl::memory> args;
};

void run_direct(const ConvPrimitive& p, const ConvDims& d, const float* src, const void* weights, const float* bias,
                float* dst) {
  thread_local std::array<ThreadArgs, 64> slots;
  ThreadArgs& t = slots[p.id % slots.size()];
  auto& eng = dnnl_util::engine();
  if (t.id != p.id) {
    t = ThreadArgs();
    t.src = dnnl::memory(p.src_md, eng, const_cast<float*>(src));
    t.weights = dnnl::memory(p.weights_md, eng, const_cast<void*>(weights));
    t.dst = dnnl::memory(p.dst_md, eng, dst);
    t.args = {{DNNL_ARG_SRC, t.src}, {DNNL_ARG_WEIGHTS, t.weights}, {DNNL_ARG_DST, t.dst}};
    if (d.has_bias) {
      t.bias = dnnl::memory(p.bias_md, eng, const_cast<float*>(bias));
      t.args.emplace(DNNL_ARG_BIAS, t.bias);
    }
    if (p.scratchpad_bytes > 0) {
      t.scratch =
          dnnl::memory(p.scratchpad_md, eng, dnnl_util::thread_buffer(dnnl_util::kConvScratchSlot, p.scratchpad_bytes));
      t.args.emplace(DNNL_ARG_SCRATCHPAD, t.scratch);
    }
    t.id = p.id;
  } else {
    t.src.set_data_handle(const_cast<float*>(src));
    t.weights.set_data_handle(const_cast<void*>(weights));
    t.dst.set_data_handle(dst);
    if (d.has_bias) t.bias.set_data_handle(const_cast<float*>(bias));
    if (p.scratchpad_bytes > 0)
      t.scratch.set_data_handle(dnnl_util::thread_buffer(dnnl_util::kConvScratchSlot, p.scratchpad_bytes));
  }
  try {
    dnnl::stream& s = dnnl_util::stream();
    p.prim.execute(s, t.args);
    s.wait();
  } catch (const dnnl::error& e) {
    t.id = 0;
    fail("Conv: oneDNN execution failed: ", e.what());
  }
}

}  // namespace

void dnnl_conv_execute(const ConvPrimitive& pr, const ConvDims& d, const float* src, const float* weights,
                       const float* bias, float* dst, const ConvPostOps& post, ConvWeightCache* packed) {
  const ConvPrimitive* p = &pr;
  auto& eng = dnnl_util::engine();
  dnnl_util::SerialIfSmall serial(p->work);
  // The steady state of a chain in one layout: no reorder around the primitive, the weights
  // packed once (or already in the primitive's layout), the residual already in dst.
  if (!p->src_reorder && !p->dst_reorder && (!p->weights_reorder || packed) && !p->sum_reorder) {
    if (post.sum && post.sum != dst) std::memcpy(dst, post.sum, p->dst_md.get_size());  // the sum post-op adds dst
    run_direct(*p, d, src, p->weights_reorder ? packed->get(*p, weights) : weights, bias, dst);
    return;
  }
  dnnl::memory src_user(p->src_plain, eng, const_cast<float*>(src));
  dnnl::memory dst_user(p->dst_plain, eng, dst);
  dnnl::memory src_m = p->src_reorder ? staged(p->src_md, dnnl_util::kConvSrcSlot) : src_user;
  dnnl::memory dst_m = p->dst_reorder ? staged(p->dst_md, dnnl_util::kConvDstSlot) : dst_user;
  dnnl::memory w_m;
  if (p->weights_reorder && packed) {
    w_m = dnnl::memory(p->weights_md, eng, packed->get(*p, weights));
  } else if (p->weights_reorder) {
    dnnl::memory w_user(p->weights_plain, eng, const_cast<float*>(weights));
    w_m = staged(p->weights_md, dnnl_util::kConvWeightsSlot);
    dnnl_util::execute(*p->weights_reorder, {{DNNL_ARG_FROM, w_user}, {DNNL_ARG_TO, w_m}}, "Conv (weight reorder)");
  } else {
    w_m = dnnl::memory(p->weights_plain, eng, const_cast<float*>(weights));
  }
  if (p->src_reorder)
    dnnl_util::execute(*p->src_reorder, {{DNNL_ARG_FROM, src_user}, {DNNL_ARG_TO, src_m}}, "Conv (input reorder)");
  if (post.sum) {  // the sum post-op adds what dst holds before the run
    if (p->sum_reorder) {
      dnnl::memory sum_user(p->sum_plain, eng, const_cast<float*>(post.sum));
      dnnl_util::execute(*p->sum_reorder, {{DNNL_ARG_FROM, sum_user}, {DNNL_ARG_TO, dst_m}}, "Conv (residual reorder)");
    } else if (post.sum != dst_m.get_data_handle()) {
      std::memcpy(dst_m.get_data_handle(), post.sum, p->dst_md.get_size());
    }
  }
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, w_m}, {DNNL_ARG_DST, dst_m}};
  if (d.has_bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p->bias_md, eng, const_cast<float*>(bias)));
  dnnl_util::execute(*p, std::move(args), "Conv");
  if (p->dst_reorder)
    dnnl_util::execute(*p->dst_reorder, {{DNNL_ARG_FROM, dst_m}, {DNNL_ARG_TO, dst_user}}, "Conv (output reorder)");
}

}  // namespace reforge::cpu
