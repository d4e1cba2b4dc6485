// Einsum on the GPU with the CPU kernel's semantics (src/ops/reduce/einsum.cc): the equation,
// the ellipsis expansion, the label sizes and every check are the CPU's (ops::einsum::plan).
// Each operand is a strided view with one stride per label (a label repeated in one operand, a
// diagonal, sums its strides; a size-1 dimension against a larger size broadcasts with stride
// 0). One thread per output element sums, over every combination of the contracted labels (those
// not in the output), the product of the operands' elements, in the CPU's compute type: float for
// 16-bit floats and float32, double for float64, and wrapping uint64 for integers (so integer
// results equal the CPU's exactly).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "core/dispatch.h"
#include "ops/reduce/einsum.h"

namespace reforge::cuda {

namespace {

constexpr int kMaxOperands = 8;

template <typename T>
using einsum_compute_t = std::conditional_t<std::is_integral_v<T>, uint64_t, compute_t<T>>;

template <typename T>
__device__ __forceinline__ einsum_compute_t<T> load_e(const T* p, int64_t i) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<uint64_t>(p[i]);
  else
    return load_c(p, i);
}

struct Operands {
  const void* data[kMaxOperands];
};

// meta: [out dims (no)] [contracted dims (nc)], then per operand [out strides (no)] [contracted strides (nc)].
template <typename T>
__global__ void einsum_dev(Operands operands, int nops, const int64_t* meta, int no, int nc, T* y, int64_t total) {
  using C = einsum_compute_t<T>;
  const int64_t* out_dims = meta;
  const int64_t* con_dims = meta + no;
  const int64_t per_op = no + nc;
  int64_t n_outer = 1, inner = 1;
  if (nc > 0) {
    for (int c = 0; c < nc - 1; ++c) n_outer *= con_dims[c];
    inner = con_dims[nc - 1];
  }
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t base[kMaxOperands];
    for (int k = 0; k < nops; ++k) base[k] = 0;
    int64_t rest = i;
    for (int d = no - 1; d >= 0; --d) {
      const int64_t q = rest / out_dims[d];
      const int64_t c = rest - q * out_dims[d];
      rest = q;
      for (int k = 0; k < nops; ++k) base[k] += c * meta[no + nc + k * per_op + d];
    }
    C acc = C(0);
    if (nc == 0) {
      C prod = C(1);
      for (int k = 0; k < nops; ++k) prod *= load_e(static_cast<const T*>(operands.data[k]), base[k]);
      acc = prod;
    } else {
      for (int64_t qo = 0; qo < n_outer; ++qo) {
        int64_t off[kMaxOperands], step[kMaxOperands];
        for (int k = 0; k < nops; ++k) {
          off[k] = base[k];
          step[k] = meta[no + nc + k * per_op + no + nc - 1];
        }
        int64_t r = qo;
        for (int c = nc - 2; c >= 0; --c) {
          const int64_t q = r / con_dims[c];
          const int64_t x = r - q * con_dims[c];
          r = q;
          for (int k = 0; k < nops; ++k) off[k] += x * meta[no + nc + k * per_op + no + c];
        }
        for (int64_t j = 0; j < inner; ++j) {
          C prod = C(1);
          for (int k = 0; k < nops; ++k) prod *= load_e(static_cast<const T*>(operands.data[k]), off[k] + j * step[k]);
          acc += prod;
        }
      }
    }
    y[i] = store_c<T>(acc);
  }
}

std::string einsum_check(const ir::Node& node) {
  if (node.inputs.size() > static_cast<size_t>(kMaxOperands))
    return "more than " + std::to_string(kMaxOperands) + " operands";
  return "";
}

void einsum_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const ops::einsum::Plan p = ops::einsum::plan(ctx);
  const DType dt = ctx.input(0).dtype();
  const size_t n_in = p.terms.size();
  REFORGE_CHECK(n_in >= 1 && n_in <= static_cast<size_t>(kMaxOperands), where,
                ": einsum on the CUDA backend takes 1 to ", kMaxOperands, " operands, got ", n_in);
  dispatch_numeric(
      dt, [](auto) {}, "Einsum");  // the CPU kernel's types (no bool), its error
  Shape out_shape;
  for (int l : p.out_labels) out_shape.push_back(p.size[static_cast<size_t>(l)]);
  Tensor& y = ctx.allocate_output_uninit(0, dt, out_shape);
  if (y.numel() == 0) return;

  // The contracted labels, in order of first appearance.
  std::vector<int> con;
  for (const auto& t : p.terms)
    for (int l : t)
      if (std::find(p.out_labels.begin(), p.out_labels.end(), l) == p.out_labels.end() &&
          std::find(con.begin(), con.end(), l) == con.end())
        con.push_back(l);
  const int no = static_cast<int>(p.out_labels.size()), nc = static_cast<int>(con.size());
  std::vector<int64_t> meta;
  for (int l : p.out_labels) meta.push_back(p.size[static_cast<size_t>(l)]);
  for (int l : con) meta.push_back(p.size[static_cast<size_t>(l)]);
  Operands operands{};
  for (size_t i = 0; i < n_in; ++i) {
    const Tensor& x = ctx.input(i);
    std::vector<int64_t> st(ops::einsum::kMaxLabels, 0);
    int64_t stride = 1;
    for (int64_t d = x.rank() - 1; d >= 0; --d) {
      const int l = p.terms[i][static_cast<size_t>(d)];
      st[static_cast<size_t>(l)] += (x.dim(d) == 1 && p.size[static_cast<size_t>(l)] != 1) ? 0 : stride;
      stride *= x.dim(d);
    }
    for (int l : p.out_labels) meta.push_back(st[static_cast<size_t>(l)]);
    for (int l : con) meta.push_back(st[static_cast<size_t>(l)]);
    operands.data[i] = x.raw();
  }
  if (meta.empty()) meta.push_back(0);  // scalars only: nothing to index, but a valid buffer
  const Tensor meta_dev = to_device(Tensor::copy_of(DType::Int64, {static_cast<int64_t>(meta.size())}, meta.data()));
  dispatch_device(dt, where.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      einsum_dev<T><<<blocks_for(y.numel()), 256, 0, stream()>>>(
          operands, static_cast<int>(n_in), meta_dev.data<int64_t>(), no, nc, y.mutable_data<T>(), y.numel());
      check_launch("einsum");
    }
  });
}

}  // namespace

void register_einsum_kernels(backends::KernelRegistry& r) { add_kernel(r, "", "Einsum", einsum_kernel, einsum_check); }

}  // namespace reforge::cuda
