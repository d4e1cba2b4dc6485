// Gather, GatherElements, GatherND, ScatterND, ScatterElements and Scatter on the GPU, with the
// CPU kernels' semantics (src/ops/tensor/gather_scatter.cc).
//
// Index tensors (int32 or int64) live in device memory and are untrusted: a first kernel resolves
// every index (negative ones count from the end) into an int64 buffer and records the first
// out-of-range one in a device-side flag; the host downloads the flag (waiting for the stream)
// and throws the CPU's Error, naming the node, before any kernel reads data through the indices.
// Gathers move elements by size. Scatters keep the CPU's sequential order wherever two updates
// can meet the same element: ScatterElements gives each thread one lane along `axis` (updates of
// different lanes never collide), ScatterND gives each thread one element of the update slice and
// walks the index tuples in order. Reductions combine in float32 for 16-bit floats, as on the CPU.
#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/device_types.cuh"
#include "backends/cuda/launch.h"
#include "ops/tensor/gather_setup.h"
#include "ops/tensor/tensor_common.h"

namespace reforge::cuda {

namespace {

using ops::Reduction;
using ops::with_reduction;

// The first bad index seen on the device.
struct IndexError {
  int flag;
  int64_t raw;
  int64_t dim;
};

// The extent each index is resolved against: dims[i % period].
struct IndexDims {
  int period = 1;
  int64_t dims[kMaxRank] = {};
};

template <typename I>
__global__ void resolve_kernel(int64_t* out, const I* in, IndexDims d, int64_t n, IndexError* err) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t dim = d.dims[i % d.period];
    const int64_t raw = static_cast<int64_t>(in[i]);
    int64_t x = raw < 0 ? raw + dim : raw;
    if (x < 0 || x >= dim) {
      if (atomicCAS(&err->flag, 0, 1) == 0) {
        err->raw = raw;
        err->dim = dim;
      }
      x = 0;
    }
    out[i] = x;
  }
}

// Device int64 copy of index tensor `idx` resolved against `dims` (the i-th index against
// dims[i % dims.size()]); throws the CPU's Error naming `where` for an index out of range.
Tensor resolve_indices(const Tensor& idx, const std::vector<int64_t>& dims, const std::string& where) {
  if (idx.dtype() != DType::Int64 && idx.dtype() != DType::Int32)
    fail(where, ": indices must be int32 or int64, got ", idx.describe());
  Tensor out = device_tensor(DType::Int64, {idx.numel()});
  const int64_t n = idx.numel();
  if (n == 0) return out;
  IndexDims d;
  REFORGE_CHECK(!dims.empty() && dims.size() <= static_cast<size_t>(kMaxRank), where, ": index tuples of length ",
                dims.size(), " are not supported on the CUDA backend");
  d.period = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) d.dims[i] = dims[i];
  // Recorded: the flag is checked after every replay (replay.cc) instead of waiting here.
  const bool recorded = recording();
  Tensor flag;
  IndexError* err = nullptr;
  if (recorded) {
    err = static_cast<IndexError*>(deferred_check(sizeof(IndexError), [where](const void* bytes) {
      IndexError e{};
      std::memcpy(&e, bytes, sizeof e);
      if (e.flag) fail(where, ": index ", e.raw, " is out of range for a dimension of size ", e.dim);
    }));
  } else {
    flag = device_tensor(DType::UInt8, {static_cast<int64_t>(sizeof(IndexError))});
    err = static_cast<IndexError*>(flag.mutable_raw());
  }
  REFORGE_CUDA_CHECK(cudaMemsetAsync(err, 0, sizeof(IndexError), stream()));
  if (idx.dtype() == DType::Int64)
    resolve_kernel<int64_t>
        <<<grid_for(n), 256, 0, stream()>>>(out.mutable_data<int64_t>(), idx.data<int64_t>(), d, n, err);
  else
    resolve_kernel<int32_t>
        <<<grid_for(n), 256, 0, stream()>>>(out.mutable_data<int64_t>(), idx.data<int32_t>(), d, n, err);
  check_launch("resolve_indices");
  if (recorded) return out;
  IndexError host{};
  REFORGE_CUDA_CHECK(cudaMemcpyAsync(&host, err, sizeof(IndexError), cudaMemcpyDeviceToHost, stream()));
  REFORGE_CUDA_CHECK(cudaStreamSynchronize(stream()));
  if (host.flag) fail(where, ": index ", host.raw, " is out of range for a dimension of size ", host.dim);
  return out;
}

// y[o, k, j] = x[o, ind[k], j] over [outer, n, inner].
template <typename T>
__global__ void gather_kernel_dev(T* dst, const T* src, const int64_t* ind, int64_t n, int64_t inner, int64_t dim,
                                  int64_t total) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = e % inner;
    const int64_t ok = e / inner;
    const int64_t k = ok % n, o = ok / n;
    dst[e] = src[(o * dim + ind[k]) * inner + j];
  }
}

void gather_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const ops::GatherSetup g = ops::gather_setup(ctx);
  const int64_t dim = g.dim, inner = g.inner;
  const Tensor ind = resolve_indices(idx, {dim}, where);
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), g.out);
  const int64_t total = y.numel();
  if (total == 0) return;
  ops::dispatch_bytes(
      x.dtype(),
      [&](auto tag) {
        using U = typename decltype(tag)::type;
        gather_kernel_dev<U><<<grid_for(total), 256, 0, stream()>>>(static_cast<U*>(y.mutable_raw()),
                                                                    static_cast<const U*>(x.raw()), ind.data<int64_t>(),
                                                                    idx.numel(), inner, dim, total);
      },
      where, kOnCuda);
  check_launch("gather");
}

// Positions of an index-shaped walk: dims, and per dimension the data stride (0 along the
// scattered/gathered axis) and the index tensor's own stride.
struct ElemWalk {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t data[kMaxRank] = {};
  int64_t own[kMaxRank] = {};
};

// The walk over `shape` (index shape, or the lane shape with `axis` at size 1) against data
// strides `xs`, `axis` left out of the data offset.
ElemWalk elem_walk(const Shape& shape, const std::vector<int64_t>& xs, int64_t axis, const std::string& where) {
  REFORGE_CHECK(shape.size() <= static_cast<size_t>(kMaxRank), where, ": rank ", shape.size(),
                " exceeds the CUDA backend's ", kMaxRank);
  ElemWalk w;
  w.rank = static_cast<int>(shape.size());
  int64_t own = 1;
  for (int d = w.rank - 1; d >= 0; --d) {
    w.dims[d] = shape[static_cast<size_t>(d)];
    w.data[d] = d == axis ? 0 : xs[static_cast<size_t>(d)];
    w.own[d] = own;
    own *= shape[static_cast<size_t>(d)];
  }
  return w;
}

template <typename T>
__global__ void gather_elements_dev(T* dst, const T* src, const int64_t* ind, ElemWalk w, int64_t axis_stride,
                                    int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, off = 0;
    for (int d = w.rank - 1; d >= 0; --d) {
      const int64_t q = rest / w.dims[d];
      off += (rest - q * w.dims[d]) * w.data[d];
      rest = q;
    }
    dst[i] = src[off + ind[i] * axis_stride];
  }
}

void gather_elements_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const int64_t axis = ops::elements_axis(ctx);
  const Tensor ind = resolve_indices(idx, {x.dim(axis)}, where);
  const std::vector<int64_t> xs = ops::contiguous_strides(x.shape());
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), idx.shape());
  const int64_t n = y.numel();
  if (n == 0) return;
  const ElemWalk w = elem_walk(idx.shape(), xs, axis, where);
  ops::dispatch_bytes(
      x.dtype(),
      [&](auto tag) {
        using U = typename decltype(tag)::type;
        gather_elements_dev<U><<<grid_for(n), 256, 0, stream()>>>(static_cast<U*>(y.mutable_raw()),
                                                                  static_cast<const U*>(x.raw()), ind.data<int64_t>(),
                                                                  w, xs[static_cast<size_t>(axis)], n);
      },
      where, kOnCuda);
  check_launch("gather_elements");
}

// Index tuples of GatherND/ScatterND: tuple t (k components, resolved) addresses data element
// (t / per_batch) * batch_stride + sum_j comp[t*k + j] * stride[j].
struct NdTuples {
  int k = 0;
  int64_t per_batch = 0, batch_stride = 0;
  int64_t stride[kMaxRank] = {};
  __device__ __forceinline__ int64_t offset(const int64_t* comp, int64_t t) const {
    int64_t off = per_batch ? (t / per_batch) * batch_stride : 0;
    for (int j = 0; j < k; ++j) off += comp[t * k + j] * stride[j];
    return off;
  }
};

// The tuples of `idx` (last dim k) into `data` with `b` batch dimensions; `comp` receives the
// resolved components (device memory); returns the tuple count through `ntuples`.
NdTuples nd_tuples(const Tensor& idx, const Shape& data, int64_t b, int64_t k, const std::string& where, Tensor* comp,
                   int64_t* ntuples) {
  REFORGE_CHECK(k <= kMaxRank, where, ": index tuples of length ", k, " are not supported on the CUDA backend");
  const std::vector<int64_t> ds = ops::contiguous_strides(data);
  std::vector<int64_t> dims(data.begin() + b, data.begin() + b + k);
  if (k == 0) dims = {1};  // no components to resolve
  *comp = resolve_indices(idx, dims, where);
  *ntuples = shape_numel(Shape(idx.shape().begin(), idx.shape().end() - 1));
  int64_t batches = 1;
  for (int64_t d = 0; d < b; ++d) batches *= data[static_cast<size_t>(d)];
  NdTuples t;
  t.k = static_cast<int>(k);
  t.per_batch = batches == 0 ? 0 : *ntuples / batches;
  t.batch_stride = b == 0 ? 0 : ds[static_cast<size_t>(b - 1)];
  for (int64_t j = 0; j < k; ++j) t.stride[j] = ds[static_cast<size_t>(b + j)];
  return t;
}

template <typename T>
__global__ void gather_nd_dev(T* dst, const T* src, const int64_t* comp, NdTuples nd, int64_t slice, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = e / slice;
    dst[e] = src[nd.offset(comp, t) + (e - t * slice)];
  }
}

void gather_nd_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const ops::NdSetup s = ops::gather_nd_setup(ctx);
  Tensor comp;
  int64_t ntuples = 0;
  const NdTuples nd = nd_tuples(idx, x.shape(), s.b, s.k, where, &comp, &ntuples);
  const int64_t slice = s.slice;
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), s.out);
  const int64_t n = y.numel();
  if (n == 0) return;
  ops::dispatch_bytes(
      x.dtype(),
      [&](auto tag) {
        using U = typename decltype(tag)::type;
        gather_nd_dev<U><<<grid_for(n), 256, 0, stream()>>>(
            static_cast<U*>(y.mutable_raw()), static_cast<const U*>(x.raw()), comp.data<int64_t>(), nd, slice, n);
      },
      where, kOnCuda);
  check_launch("gather_nd");
}

template <Reduction R, typename T>
__device__ __forceinline__ T combine(T a, T b) {
  if constexpr (R == Reduction::None) {
    return b;
  } else if constexpr (std::is_same_v<T, bool>) {
    return (R == Reduction::Add || R == Reduction::Max) ? (a || b) : (a && b);
  } else {
    const auto x = load_c(&a, 0), y = load_c(&b, 0);
    if constexpr (R == Reduction::Add) return store_c<T>(x + y);
    if constexpr (R == Reduction::Mul) return store_c<T>(x * y);
    if constexpr (R == Reduction::Max) return store_c<T>(x < y ? y : x);
    if constexpr (R == Reduction::Min) return store_c<T>(y < x ? y : x);
  }
}

// y = x, on the stream.
Tensor& copy_of(ops::KernelContext& ctx, const Tensor& x) {
  Tensor& y = ctx.allocate_output_uninit(0, x.dtype(), x.shape());
  if (x.nbytes())
    REFORGE_CUDA_CHECK(cudaMemcpyAsync(y.mutable_raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice, stream()));
  return y;
}

// Thread j applies element j of every update slice, tuple by tuple in order.
template <Reduction R, typename T>
__global__ void scatter_nd_dev(T* dst, const T* upd, const int64_t* comp, NdTuples nd, int64_t ntuples, int64_t slice) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < slice; j += int64_t{gridDim.x} * blockDim.x) {
    for (int64_t t = 0; t < ntuples; ++t) {
      T& o = dst[nd.offset(comp, t) + j];
      o = combine<R, T>(o, upd[t * slice + j]);
    }
  }
}

void scatter_nd_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  const Reduction red = ops::scatter_reduction(ctx);
  const ops::NdSetup s = ops::scatter_nd_setup(ctx);
  Tensor comp;
  int64_t ntuples = 0;
  const NdTuples nd = nd_tuples(idx, x.shape(), 0, s.k, where, &comp, &ntuples);
  const int64_t slice = s.slice;
  Tensor& y = copy_of(ctx, x);
  if (ntuples == 0 || slice == 0) return;
  dispatch_device(x.dtype(), where.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_reduction(red, [&](auto rc) {
      constexpr Reduction R = decltype(rc)::value;
      scatter_nd_dev<R, T><<<grid_for(slice), 256, 0, stream()>>>(y.mutable_data<T>(), upd.data<T>(),
                                                                  comp.data<int64_t>(), nd, ntuples, slice);
    });
  });
  check_launch("scatter_nd");
}

// Thread l owns lane l (every index position with the axis coordinate free) and applies its
// updates along the axis in order.
template <Reduction R, typename T>
__global__ void scatter_elements_dev(T* dst, const T* upd, const int64_t* ind, ElemWalk lanes, int64_t along,
                                     int64_t along_stride, int64_t axis_stride, int64_t nlanes) {
  for (int64_t l = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; l < nlanes; l += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = l, off = 0, own = 0;
    for (int d = lanes.rank - 1; d >= 0; --d) {
      const int64_t q = rest / lanes.dims[d];
      const int64_t c = rest - q * lanes.dims[d];
      off += c * lanes.data[d];
      own += c * lanes.own[d];
      rest = q;
    }
    for (int64_t a = 0; a < along; ++a) {
      const int64_t i = own + a * along_stride;
      T& o = dst[off + ind[i] * axis_stride];
      o = combine<R, T>(o, upd[i]);
    }
  }
}

// ScatterElements (11+) and Scatter (9-10, the same op without reductions).
void scatter_elements_kernel(ops::KernelContext& ctx) {
  const std::string where = ctx.node().label();
  const Tensor& x = ctx.input(0);
  const Tensor& idx = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  const Reduction red = ops::scatter_reduction(ctx);
  const int64_t axis = ops::scatter_elements_axis(ctx);
  const Tensor ind = resolve_indices(idx, {x.dim(axis)}, where);
  const std::vector<int64_t> xs = ops::contiguous_strides(x.shape());
  Tensor& y = copy_of(ctx, x);
  if (idx.numel() == 0) return;
  // Lanes: the index shape with the axis collapsed to 1; own strides are the index tensor's.
  const std::vector<int64_t> is = ops::contiguous_strides(idx.shape());
  Shape lane_shape = idx.shape();
  lane_shape[static_cast<size_t>(axis)] = 1;
  ElemWalk lanes = elem_walk(lane_shape, xs, axis, where);
  for (int d = 0; d < lanes.rank; ++d) lanes.own[d] = is[static_cast<size_t>(d)];
  const int64_t nlanes = shape_numel(lane_shape);
  const int64_t along = idx.dim(axis), along_stride = is[static_cast<size_t>(axis)];
  dispatch_device(x.dtype(), where.c_str(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_reduction(red, [&](auto rc) {
      constexpr Reduction R = decltype(rc)::value;
      scatter_elements_dev<R, T>
          <<<grid_for(nlanes), 256, 0, stream()>>>(y.mutable_data<T>(), upd.data<T>(), ind.data<int64_t>(), lanes,
                                                   along, along_stride, xs[static_cast<size_t>(axis)], nlanes);
    });
  });
  check_launch("scatter_elements");
}

}  // namespace

void register_gather_kernels(backends::KernelRegistry& r) {
  add_kernel(r, "", "Gather", gather_kernel);
  add_kernel(r, "", "GatherElements", gather_elements_kernel);
  add_kernel(r, "", "GatherND", gather_nd_kernel);
  add_kernel(r, "", "ScatterND", scatter_nd_kernel, ops::reduction_check);
  add_kernel(r, "", "ScatterElements", scatter_elements_kernel, ops::reduction_check);
  add_kernel(r, "", "Scatter", scatter_elements_kernel, ops::reduction_check);
}

}  // namespace reforge::cuda
