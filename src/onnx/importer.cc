#include "onnx/importer.h"

#include <fcntl.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

#include "core/mapped_file.h"
#include "core/narrow.h"
#include "core/regular_file.h"
#include "ir/subgraph.h"
#include "onnx/proto/onnx.pb.h"

namespace reforge::onnx {

namespace fs = std::filesystem;
using ::onnx::AttributeProto;
using ::onnx::GraphProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

namespace {

struct Ctx {
  std::string base_dir;  // external data folder; empty = external data not allowed
  // The proto is the importer's own parse, read once: a tensor takes its raw_data string rather
  // than copying it or sharing the whole proto, so each weight's bytes live exactly as long as
  // that weight (a build that re-lays out a weight frees the original at once).
  bool owns_proto = false;
};

std::string norm_domain(const std::string& d) { return d == "ai.onnx" ? std::string() : d; }

template <typename T, typename Field>
void store_field(Tensor& t, const Field& field) {
  T* d = t.mutable_data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) d[i] = static_cast<T>(field.Get(static_cast<int>(i)));
}

template <typename Field>
void check_count(const TensorProto& tp, const Field& field, int64_t n) {
  if (static_cast<int64_t>(field.size()) != n)
    fail("tensor '", tp.name(), "' has ", field.size(), " values in its typed field, its shape needs ", n);
}

// A 4- or 2-bit tensor from ONNX's packed bytes, one element per byte (core/narrow.h).
Tensor unpacked(DType dtype, const Shape& shape, const unsigned char* packed) {
  Tensor t = Tensor::empty(dtype, shape);
  unpack_subbyte(dtype, packed, t.numel(), t.mutable_data<uint8_t>());
  return t;
}

// Returns (path, offset, length) of an external tensor after validating the location.
Tensor read_external(const TensorProto& tp, DType dtype, const Shape& shape, const Ctx& ctx) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : tp.external_data()) {
    try {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset")
        offset = std::stoll(kv.value());
      else if (kv.key() == "length")
        length = std::stoll(kv.value());
    } catch (const std::exception&) {
      fail("tensor '", tp.name(), "': external data field '", kv.key(), "' has invalid value '", kv.value(), "'");
    }
  }
  if (location.empty()) fail("tensor '", tp.name(), "': external data without a location");
  if (ctx.base_dir.empty())
    fail("tensor '", tp.name(), "': external data '", location, "' but the model was not loaded from a file");
  fs::path rel(location);
  if (rel.is_absolute()) fail("tensor '", tp.name(), "': external data location '", location, "' is an absolute path");
  fs::path base = fs::weakly_canonical(fs::path(ctx.base_dir));
  fs::path full = fs::weakly_canonical(base / rel);
  auto [b, f] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (b != base.end())
    fail("tensor '", tp.name(), "': external data location '", location, "' escapes the model's folder");
  auto file = MappedFile::open(full.string(), "tensor '" + tp.name() + "': external data");
  const bool packed = onnx_bits_per_element(dtype) < 8;
  size_t need = onnx_packed_bytes(dtype, shape_numel(shape));
  if (offset < 0) fail("tensor '", tp.name(), "': negative external data offset ", offset);
  if (length >= 0 && static_cast<size_t>(length) != need)
    fail("tensor '", tp.name(), "': external data length ", length, " does not match ", dtype_name(dtype),
         shape_str(shape), " (", need, " bytes)");
  if (static_cast<size_t>(offset) > file->size() || file->size() - static_cast<size_t>(offset) < need)
    fail("tensor '", tp.name(), "': external data '", location, "' is ", file->size(), " bytes, too short for ", need,
         " bytes at offset ", offset);
  const unsigned char* p = file->data() + offset;
  if (packed) return unpacked(dtype, shape, p);
  // Kernels read elements in their natural alignment; a tensor at an odd offset is copied.
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(dtype) != 0) return Tensor::copy_of(dtype, shape, p);
  return Tensor::wrap(dtype, shape, file, p);
}

}  // namespace

Tensor tensor_from_proto(const TensorProto& tp, const Ctx& ctx) {
  DType dtype = dtype_from_onnx(tp.data_type());
  if (dtype == DType::Undefined) fail("tensor '", tp.name(), "' has unknown data type ", tp.data_type());
  if (!has_storage(dtype))
    fail("tensor '", tp.name(), "' has type ", dtype_name(dtype), ", which reforge does not support");
  if (tp.has_segment()) fail("tensor '", tp.name(), "' is segmented, which reforge does not support");
  Shape shape;
  for (int64_t d : tp.dims()) {
    if (d < 0) fail("tensor '", tp.name(), "' has negative dimension ", d);
    shape.push_back(d);
  }
  int64_t n;
  try {
    n = shape_numel(shape);
  } catch (Error& e) {
    throw e.with_context("in tensor '" + tp.name() + "'");
  }
  if (tp.data_location() == TensorProto::EXTERNAL) return read_external(tp, dtype, shape, ctx);
  const bool packed = onnx_bits_per_element(dtype) < 8;
  if (tp.has_raw_data()) {
    const std::string& raw = tp.raw_data();
    if (raw.size() != onnx_packed_bytes(dtype, n))
      fail("tensor '", tp.name(), "' raw_data has ", raw.size(), " bytes, ", dtype_name(dtype), shape_str(shape),
           " needs ", onnx_packed_bytes(dtype, n));
    if (packed) return unpacked(dtype, shape, reinterpret_cast<const unsigned char*>(raw.data()));
    // The parsed proto already holds the one copy of these bytes; wrap it rather than copy again
    // when it is naturally aligned (kernels do not assume more than element alignment on inputs).
    auto addr = reinterpret_cast<uintptr_t>(raw.data());
    if (ctx.owns_proto && addr % 16 == 0) {
      auto owned = std::make_shared<std::string>(std::move(const_cast<std::string&>(raw)));
      if (reinterpret_cast<uintptr_t>(owned->data()) == addr) return Tensor::wrap(dtype, shape, owned, owned->data());
      return Tensor::copy_of(dtype, shape, owned->data());
    }
    return Tensor::copy_of(dtype, shape, raw.data());
  }
  Tensor t = Tensor::empty(dtype, shape);
  switch (dtype) {
    case DType::Float32:
      check_count(tp, tp.float_data(), n);
      store_field<float>(t, tp.float_data());
      break;
    case DType::Float64:
      check_count(tp, tp.double_data(), n);
      store_field<double>(t, tp.double_data());
      break;
    case DType::Int64:
      check_count(tp, tp.int64_data(), n);
      store_field<int64_t>(t, tp.int64_data());
      break;
    case DType::UInt32:
      check_count(tp, tp.uint64_data(), n);
      store_field<uint32_t>(t, tp.uint64_data());
      break;
    case DType::UInt64:
      check_count(tp, tp.uint64_data(), n);
      store_field<uint64_t>(t, tp.uint64_data());
      break;
    case DType::Int32:
      check_count(tp, tp.int32_data(), n);
      store_field<int32_t>(t, tp.int32_data());
      break;
    case DType::Int16:
      check_count(tp, tp.int32_data(), n);
      store_field<int16_t>(t, tp.int32_data());
      break;
    case DType::Int8:
      check_count(tp, tp.int32_data(), n);
      store_field<int8_t>(t, tp.int32_data());
      break;
    case DType::UInt16:
      check_count(tp, tp.int32_data(), n);
      store_field<uint16_t>(t, tp.int32_data());
      break;
    case DType::UInt8:
      check_count(tp, tp.int32_data(), n);
      store_field<uint8_t>(t, tp.int32_data());
      break;
    case DType::Bool:
      check_count(tp, tp.int32_data(), n);
      {
        bool* d = t.mutable_data<bool>();
        for (int64_t i = 0; i < n; ++i) d[i] = tp.int32_data(static_cast<int>(i)) != 0;
      }
      break;
    case DType::Float16:
    case DType::BFloat16:
      check_count(tp, tp.int32_data(), n);
      {
        uint16_t* d = t.mutable_data<uint16_t>();
        for (int64_t i = 0; i < n; ++i) d[i] = static_cast<uint16_t>(tp.int32_data(static_cast<int>(i)));
      }
      break;
    case DType::Float8E4M3FN:
    case DType::Float8E4M3FNUZ:
    case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ:
    case DType::Float8E8M0:
      // One code per int32_data entry, in its low byte.
      check_count(tp, tp.int32_data(), n);
      store_field<uint8_t>(t, tp.int32_data());
      break;
    case DType::Int4:
    case DType::UInt4:
    case DType::Float4E2M1:
    case DType::Int2:
    case DType::UInt2: {
      // One packed byte per int32_data entry (the raw_data packing, byte by byte).
      const int64_t bytes = static_cast<int64_t>(onnx_packed_bytes(dtype, n));
      check_count(tp, tp.int32_data(), bytes);
      std::vector<unsigned char> b(static_cast<size_t>(bytes));
      for (int64_t i = 0; i < bytes; ++i)
        b[static_cast<size_t>(i)] = static_cast<unsigned char>(tp.int32_data(static_cast<int>(i)));
      return unpacked(dtype, shape, b.data());
    }
    default:
      fail("tensor '", tp.name(), "' has type ", dtype_name(dtype), ", which reforge does not support");
  }
  return t;
}

namespace {

ir::ValueInfo value_info(const ::onnx::ValueInfoProto& vi) {
  ir::ValueInfo v;
  v.name = vi.name();
  if (vi.has_type()) {
    if (!vi.type().has_tensor_type())
      fail("value '", vi.name(), "' is not a tensor (sequences, maps and optionals are not supported)");
    const auto& tt = vi.type().tensor_type();
    v.dtype = dtype_from_onnx(tt.elem_type());
    if (tt.has_shape()) {
      v.has_shape = true;
      for (const auto& d : tt.shape().dim()) {
        ir::Dim dim;
        if (d.has_dim_value()) {
          if (d.dim_value() < 0) fail("value '", vi.name(), "' has negative dimension ", d.dim_value());
          dim.value = d.dim_value();
        } else if (d.has_dim_param()) {
          dim.symbol = d.dim_param();
        }
        v.shape.push_back(dim);
      }
    }
  }
  return v;
}

ir::Graph convert_graph(const GraphProto& gp, const std::map<std::string, int>& opsets, const Ctx& ctx);

ir::Attribute convert_attr(const AttributeProto& ap, const std::map<std::string, int>& opsets, const Ctx& ctx) {
  ir::Attribute a;
  a.name = ap.name();
  switch (ap.type()) {
    case AttributeProto::FLOAT:
      a.type = ir::AttrType::Float;
      a.f = ap.f();
      break;
    case AttributeProto::INT:
      a.type = ir::AttrType::Int;
      a.i = ap.i();
      break;
    case AttributeProto::STRING:
      a.type = ir::AttrType::String;
      a.s = ap.s();
      break;
    case AttributeProto::TENSOR:
      a.type = ir::AttrType::Tensor;
      a.t = tensor_from_proto(ap.t(), ctx);
      break;
    case AttributeProto::GRAPH:
      a.type = ir::AttrType::Graph;
      a.g = std::make_shared<ir::Graph>(convert_graph(ap.g(), opsets, ctx));
      break;
    case AttributeProto::FLOATS:
      a.type = ir::AttrType::Floats;
      a.floats.assign(ap.floats().begin(), ap.floats().end());
      break;
    case AttributeProto::INTS:
      a.type = ir::AttrType::Ints;
      a.ints.assign(ap.ints().begin(), ap.ints().end());
      break;
    case AttributeProto::STRINGS:
      a.type = ir::AttrType::Strings;
      a.strings.assign(ap.strings().begin(), ap.strings().end());
      break;
    case AttributeProto::TENSORS:
      a.type = ir::AttrType::Tensors;
      for (const auto& t : ap.tensors()) a.tensors.push_back(tensor_from_proto(t, ctx));
      break;
    default:
      // Older files may leave `type` unset; infer it from the populated field.
      if (ap.has_f()) {
        a.type = ir::AttrType::Float;
        a.f = ap.f();
      } else if (ap.has_i()) {
        a.type = ir::AttrType::Int;
        a.i = ap.i();
      } else if (ap.has_s()) {
        a.type = ir::AttrType::String;
        a.s = ap.s();
      } else if (ap.has_t()) {
        a.type = ir::AttrType::Tensor;
        a.t = tensor_from_proto(ap.t(), ctx);
      } else if (ap.ints_size()) {
        a.type = ir::AttrType::Ints;
        a.ints.assign(ap.ints().begin(), ap.ints().end());
      } else if (ap.floats_size()) {
        a.type = ir::AttrType::Floats;
        a.floats.assign(ap.floats().begin(), ap.floats().end());
      } else if (ap.strings_size()) {
        a.type = ir::AttrType::Strings;
        a.strings.assign(ap.strings().begin(), ap.strings().end());
      } else if (ap.type() != AttributeProto::UNDEFINED)
        fail("attribute '", ap.name(), "' has type ", static_cast<int>(ap.type()), ", which reforge does not support");
  }
  return a;
}

ir::Graph convert_graph(const GraphProto& gp, const std::map<std::string, int>& opsets, const Ctx& ctx) {
  ir::Graph g;
  g.name = gp.name();
  g.opsets = opsets;
  if (gp.sparse_initializer_size() > 0)
    fail("graph '", gp.name(), "' has sparse initializers, which reforge does not support");
  for (const auto& tp : gp.initializer()) {
    if (tp.name().empty()) fail("graph '", gp.name(), "' has an initializer without a name");
    Tensor t;
    try {
      t = tensor_from_proto(tp, ctx);
    } catch (Error& e) {
      throw e.with_context("while reading initializer '" + tp.name() + "'");
    }
    if (!g.initializers.emplace(tp.name(), std::move(t)).second) fail("initializer '", tp.name(), "' is defined twice");
  }
  for (const auto& vi : gp.input())
    if (!g.initializers.count(vi.name())) g.inputs.push_back(value_info(vi));
  for (const auto& vi : gp.output()) g.outputs.push_back(value_info(vi));
  g.nodes.reserve(static_cast<size_t>(gp.node_size()));
  for (int i = 0; i < gp.node_size(); ++i) {
    const NodeProto& np = gp.node(i);
    ir::Node n;
    n.name = np.name();
    n.op_type = np.op_type();
    n.domain = norm_domain(np.domain());
    auto it = opsets.find(n.domain);
    n.opset = it == opsets.end() ? 0 : it->second;
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& m : np.metadata_props()) n.metadata.emplace_back(m.key(), m.value());
    try {
      for (const auto& ap : np.attribute()) n.attrs[ap.name()] = convert_attr(ap, opsets, ctx);
    } catch (Error& e) {
      throw e.with_context("while reading node #" + std::to_string(i) + " " + n.label());
    }
    g.nodes.push_back(std::move(n));
  }
  return g;
}

ir::Graph convert_model(std::shared_ptr<ModelProto> model, const Ctx& base_ctx) {
  Ctx ctx = base_ctx;
  ctx.owns_proto = true;  // callers pass the importer's own parse
  if (!model->has_graph()) fail("the model has no graph");
  std::map<std::string, int> opsets;
  for (const auto& os : model->opset_import()) {
    int64_t v = os.version();
    if (v < 1 || v > 10000) fail("opset import for domain '", os.domain(), "' has invalid version ", v);
    opsets[norm_domain(os.domain())] = static_cast<int>(v);
  }
  if (model->opset_import_size() == 0 && model->ir_version() < 3) opsets[""] = 1;
  ir::Graph g = convert_graph(model->graph(), opsets, ctx);
  ir::bind_captures(g);
  g.ir_version = model->ir_version();
  for (const auto& m : model->metadata_props()) g.metadata.emplace_back(m.key(), m.value());
  return g;
}

std::shared_ptr<ModelProto> parse_model(const void* data, size_t size, const std::string& what) {
  if (size > static_cast<size_t>(INT_MAX)) fail(what, " is larger than 2 GiB; store big tensors as external data");
  auto model = std::make_shared<ModelProto>();
  if (!model->ParseFromArray(data, static_cast<int>(size)))
    fail(what, " is not a valid ONNX model (protobuf parse failed)");
  return model;
}

}  // namespace

// Parses from the file through a small buffer (not a mapping): the parsed proto holds the one
// copy of the weights that the graph's tensors then wrap, so peak memory is about one model size
// rather than two (mapped pages + parsed copy).
std::shared_ptr<ModelProto> parse_model_file(const std::string& path) {
  // RegularFile: a FIFO or device named as the model is refused, not opened (a FIFO blocks).
  RegularFile file = RegularFile::open(path, "model");
  if (file.size() > static_cast<uint64_t>(INT_MAX))
    fail(file.subject(), " is ", byte_size_str(file.size()),
         ", larger than the 2 GiB a protobuf can hold; store big tensors as external data");
  auto model = std::make_shared<ModelProto>();
  bool ok;
  {
    google::protobuf::io::FileInputStream in(file.fd(), 1 << 20);
    ok = model->ParseFromZeroCopyStream(&in);
  }
  if (!ok) fail("'", path, "' is not a valid ONNX model (protobuf parse failed)");
  return model;
}

ir::Graph import_model_file(const std::string& path, const ImportOptions& options) {
  try {
    auto model = parse_model_file(path);
    Ctx ctx;
    ctx.base_dir = options.base_dir.empty() ? fs::absolute(fs::path(path)).parent_path().string() : options.base_dir;
    return convert_model(model, ctx);
  } catch (Error& e) {
    throw e.with_context("while importing '" + path + "'");
  }
}

ir::Graph import_model_bytes(const void* data, size_t size, const ImportOptions& options) {
  auto model = parse_model(data, size, "model data");
  Ctx ctx;
  ctx.base_dir = options.base_dir;
  return convert_model(model, ctx);
}

Tensor read_tensor_file(const std::string& path) {
  try {
    auto file = MappedFile::open(path, "tensor file");
    if (file->size() > static_cast<size_t>(INT_MAX)) fail("file is larger than 2 GiB");
    TensorProto tp;
    if (!tp.ParseFromArray(file->data(), static_cast<int>(file->size()))) fail("not a valid TensorProto");
    Ctx ctx;
    ctx.base_dir = fs::absolute(fs::path(path)).parent_path().string();
    return tensor_from_proto(tp, ctx);
  } catch (Error& e) {
    throw e.with_context("while reading tensor file '" + path + "'");
  }
}

}  // namespace reforge::onnx
