#include "onnx/exporter.h"

#include <cstdio>
#include <filesystem>
#include <optional>

#include "core/atomic_file.h"
#include "core/narrow.h"
#include "onnx/proto/onnx.pb.h"

namespace reforge::onnx {

namespace fs = std::filesystem;

namespace {

void fill_tensor(::onnx::TensorProto* tp, const std::string& name, const Tensor& t) {
  tp->set_name(name);
  tp->set_data_type(static_cast<int>(t.dtype()));
  for (int64_t d : t.shape()) tp->add_dims(d);
  if (onnx_bits_per_element(t.dtype()) < 8) {  // 4- and 2-bit types are packed (core/narrow.h)
    std::string packed(onnx_packed_bytes(t.dtype(), t.numel()), '\0');
    pack_subbyte(t.dtype(), t.data<uint8_t>(), t.numel(), reinterpret_cast<uint8_t*>(packed.data()));
    tp->set_raw_data(std::move(packed));
    return;
  }
  tp->set_raw_data(std::string(static_cast<const char*>(t.raw()), t.nbytes()));
}

void fill_value_info(::onnx::ValueInfoProto* vp, const ir::ValueInfo& v) {
  vp->set_name(v.name);
  if (v.dtype == DType::Undefined) return;
  auto* tt = vp->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int>(v.dtype));
  if (!v.has_shape) return;
  auto* shape = tt->mutable_shape();
  for (const auto& d : v.shape) {
    auto* dim = shape->add_dim();
    if (d.fixed())
      dim->set_dim_value(d.value);
    else if (!d.symbol.empty())
      dim->set_dim_param(d.symbol);
  }
}

void fill_attr(::onnx::AttributeProto* ap, const ir::Attribute& a) {
  ap->set_name(a.name);
  switch (a.type) {
    case ir::AttrType::Float:
      ap->set_type(::onnx::AttributeProto::FLOAT);
      ap->set_f(a.f);
      break;
    case ir::AttrType::Int:
      ap->set_type(::onnx::AttributeProto::INT);
      ap->set_i(a.i);
      break;
    case ir::AttrType::String:
      ap->set_type(::onnx::AttributeProto::STRING);
      ap->set_s(a.s);
      break;
    case ir::AttrType::Tensor:
      ap->set_type(::onnx::AttributeProto::TENSOR);
      fill_tensor(ap->mutable_t(), "", a.t);
      break;
    case ir::AttrType::Floats:
      ap->set_type(::onnx::AttributeProto::FLOATS);
      for (float f : a.floats) ap->add_floats(f);
      break;
    case ir::AttrType::Ints:
      ap->set_type(::onnx::AttributeProto::INTS);
      for (int64_t i : a.ints) ap->add_ints(i);
      break;
    case ir::AttrType::Strings:
      ap->set_type(::onnx::AttributeProto::STRINGS);
      for (const auto& s : a.strings) ap->add_strings(s);
      break;
    default:
      fail("write_model_file: attribute '", a.name, "' has a type the exporter does not write");
  }
}

}  // namespace

void write_model_file(const ir::Graph& g, const std::string& path, const ExportOptions& o) {
  ::onnx::ModelProto m;
  m.set_ir_version(g.ir_version ? g.ir_version : 10);
  m.set_producer_name("reforge");
  for (const auto& [domain, version] : g.opsets) {
    auto* os = m.add_opset_import();
    os->set_domain(domain);
    os->set_version(version);
  }
  auto* gp = m.mutable_graph();
  gp->set_name(g.name.empty() ? "graph" : g.name);
  for (const auto& v : g.inputs) fill_value_info(gp->add_input(), v);
  for (const auto& v : g.outputs) fill_value_info(gp->add_output(), v);
  std::string ext_name = o.external_file.empty() ? fs::path(path).filename().string() + ".data" : o.external_file;
  fs::path ext_path = fs::path(path).parent_path() / ext_name;
  std::optional<AtomicFile> ext;
  size_t offset = 0;
  for (const auto& [name, t] : g.initializers) {
    auto* tp = gp->add_initializer();
    // Sub-byte tensors are stored inline: external data holds the in-memory bytes as they are.
    if (o.external_threshold == 0 || t.nbytes() < o.external_threshold || onnx_bits_per_element(t.dtype()) < 8) {
      fill_tensor(tp, name, t);
      continue;
    }
    if (!ext) ext.emplace(ext_path.string(), "external data");
    tp->set_name(name);
    tp->set_data_type(static_cast<int>(t.dtype()));
    for (int64_t d : t.shape()) tp->add_dims(d);
    tp->set_data_location(::onnx::TensorProto::EXTERNAL);
    auto kv = [&](const char* k, const std::string& v) {
      auto* e = tp->add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    kv("location", ext_name);
    kv("offset", std::to_string(offset));
    kv("length", std::to_string(t.nbytes()));
    ext->write(t.raw(), t.nbytes());
    offset += t.nbytes();
    size_t pad = (4096 - offset % 4096) % 4096;  // page-align the next tensor, so it can be mapped
    static const char zeros[4096] = {};
    ext->write(zeros, pad);
    offset += pad;
  }
  // The data file first: the model that names it then never points at a missing one.
  if (ext) ext->commit();
  for (const auto& n : g.nodes) {
    auto* np = gp->add_node();
    np->set_name(n.name);
    np->set_op_type(n.op_type);
    np->set_domain(n.domain);
    for (const auto& i : n.inputs) np->add_input(i);
    for (const auto& out : n.outputs) np->add_output(out);
    for (const auto& [k, a] : n.attrs) fill_attr(np->add_attribute(), a);
    for (const auto& [k, v] : n.metadata) {
      auto* md = np->add_metadata_props();
      md->set_key(k);
      md->set_value(v);
    }
  }
  AtomicFile out(path, "model");
  if (!m.SerializeToFileDescriptor(out.fd()))
    fail("cannot write model '", path, "' (the model may exceed protobuf's 2 GiB; use external data)");
  out.commit();
}

}  // namespace reforge::onnx
