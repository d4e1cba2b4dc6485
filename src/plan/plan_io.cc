// Plan writer: encodes a Plan as header + JSON metadata + aligned data section
// (docs/plan-format.md) and writes it atomically. The reader is plan_read.cc.
#include "plan/plan_io.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/narrow.h"
#include "plan/plan_format.h"

namespace reforge::plan {
namespace {

using json = nlohmann::json;
using namespace format;

json str(const std::string& s) {
  if (valid_utf8(s)) return s;
  return json{{"hex", to_hex(s)}};
}

json strs(const std::vector<std::string>& v) {
  json a = json::array();
  for (const auto& s : v) a.push_back(str(s));
  return a;
}

json pairs(const std::vector<std::pair<std::string, std::string>>& v) {
  json a = json::array();
  for (const auto& [k, val] : v) a.push_back(json::array({str(k), str(val)}));
  return a;
}

json ints(const std::vector<int64_t>& v) {
  json a = json::array();
  for (int64_t x : v) a.push_back(x);
  return a;
}

json dim(const ir::Dim& d) {
  if (d.symbol.empty()) return d.value;
  if (d.value == -1) return str(d.symbol);
  return json::array({d.value, str(d.symbol)});
}

json operand(const Operand& o) { return json::array({operand_kind_name(o.kind), o.index}); }

struct Blob {
  const void* data;
  size_t nbytes;
  uint64_t offset;  // relative to the data section
};

// Builds the metadata JSON and collects the tensor bytes that go into the data section.
class Encoder {
 public:
  uint64_t data_size() const { return data_size_; }
  const std::vector<Blob>& blobs() const { return blobs_; }

  static json build_record(const BuildRecord& r) {
    json j;
    j["weight_packing"] = weight_packing_name(r.weight_packing);
    j["skip_passes"] = strs(r.skip_passes);
    j["verify_recipes"] = r.verify_recipes;
    j["backend"] = str(r.backend);
    if (r.host_fallback) j["host_fallback"] = true;            // optional: absent means false
    if (r.reference_rounding) j["reference_rounding"] = true;  // optional: absent means false
    j["isa"] = strs(r.isa);
    j["layouts"] = {{"linear_panels", r.layouts.linear_panels},
                    {"half_panels", r.layouts.half_panels},
                    {"linear_transposed", r.layouts.linear_transposed}};
    return j;
  }

  json plan(const Plan& p) {
    json j;
    j["producer"] = str(p.producer);
    j["model_name"] = str(p.model_name);
    j["mode"] = build_mode_name(p.mode);
    j["precision"] = precision_name(p.precision);
    if (p.activations != Precision::Fp32) j["activations"] = precision_name(p.activations);
    if (p.precision == Precision::Int4) j["block_size"] = p.block_size;
    j["individual_patterns"] = strs(p.individual_patterns);
    j["literal_names"] = strs(p.literal_names);
    if (!p.literal_bindings.empty()) {
      json lb = json::array();
      for (const auto& b : p.literal_bindings)
        lb.push_back({{"name", str(b.name)},
                      {"dtype", static_cast<int32_t>(b.dtype)},
                      {"shape", ints(b.shape)},
                      {"hash", hex64(b.hash)},
                      {"binding", binding(b.binding, "literal '" + b.name + "'")}});
      j["literal_bindings"] = std::move(lb);
    }
    j["stripped"] = p.stripped;
    if (p.build) j["build"] = build_record(*p.build);
    // Structural tensors first: they sit next to the metadata and are read on every load.
    j["graph"] = graph(p.graph);
    const std::vector<std::string> placement = node_backends(p);
    j["placement"] = strs(placement);
    json lits = json::array();
    for (size_t i = 0; i < p.literals.size(); ++i) lits.push_back(tensor(p.literals[i], str_cat("literals[", i, "]")));
    j["literals"] = std::move(lits);
    json srcs = json::array();
    for (const auto& s : p.sources) srcs.push_back(source(s));
    j["sources"] = std::move(srcs);
    json ws = json::array();
    for (const auto& w : p.weights) ws.push_back(weight(w));
    j["weights"] = std::move(ws);
    j["fingerprint"] = strs(p.fingerprint);
    if (!p.values.empty()) {
      json vs = json::array();
      for (const auto& v : p.values) vs.push_back(value_info(v));
      j["values"] = std::move(vs);
    }
    return j;
  }

 private:
  // {"offset", "nbytes", "xxh3"} of a tensor's bytes, appended to the data section.
  json data_ref(const Tensor& t) {
    size_t n = t.nbytes();
    REFORGE_ASSERT(n == 0 || t.raw() != nullptr);
    uint64_t offset = align_up(data_size_);
    blobs_.push_back({t.raw(), n, offset});
    data_size_ = offset + n;
    return json{{"offset", offset}, {"nbytes", static_cast<uint64_t>(n)}, {"xxh3", hex64(hash_bytes(t.raw(), n))}};
  }

  // XXH3-64 of each kPiece-byte piece of a large weight, hashed on all threads.
  static json piece_hashes(const Tensor& t) {
    const auto* p = static_cast<const unsigned char*>(t.raw());
    const uint64_t n = t.nbytes();
    const int64_t count = static_cast<int64_t>((n + kPiece - 1) / kPiece);
    std::vector<uint64_t> h(static_cast<size_t>(count));
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t k = 0; k < count; ++k) {
      const uint64_t off = static_cast<uint64_t>(k) * kPiece;
      h[static_cast<size_t>(k)] = hash_bytes(p + off, std::min(kPiece, n - off));
    }
    json a = json::array();
    for (uint64_t x : h) a.push_back(hex64(x));
    return a;
  }

  void check_storable(const Tensor& t, const std::string& where) {
    if (!has_storage(t.dtype()))
      fail(where, ": tensors of type ", dtype_name(t.dtype()), " cannot be stored in a plan");
  }

  json tensor(const Tensor& t, const std::string& where) {
    if (!t.defined()) return nullptr;
    check_storable(t, where);
    json j = data_ref(t);
    j["dtype"] = static_cast<int32_t>(t.dtype());
    j["shape"] = ints(t.shape());
    return j;
  }

  json attribute(const std::string& key, const ir::Attribute& a, const std::string& where) {
    std::string at = where + " attribute '" + key + "'";
    json j;
    j["name"] = str(a.name);
    if (key != a.name) j["key"] = str(key);
    j["type"] = attr_type_name(a.type);
    switch (a.type) {
      case ir::AttrType::Undefined:
        break;
      case ir::AttrType::Float:
        j["f"] = float_to_bits(a.f);
        break;
      case ir::AttrType::Int:
        j["i"] = a.i;
        break;
      case ir::AttrType::String:
        j["s"] = str(a.s);
        break;
      case ir::AttrType::Tensor:
        j["t"] = tensor(a.t, at);
        break;
      case ir::AttrType::Floats: {
        json f = json::array();
        for (float x : a.floats) f.push_back(float_to_bits(x));
        j["floats"] = std::move(f);
        break;
      }
      case ir::AttrType::Ints:
        j["ints"] = ints(a.ints);
        break;
      case ir::AttrType::Strings:
        j["strings"] = strs(a.strings);
        break;
      case ir::AttrType::Tensors: {
        json ts = json::array();
        for (size_t i = 0; i < a.tensors.size(); ++i) ts.push_back(tensor(a.tensors[i], str_cat(at, "[", i, "]")));
        j["tensors"] = std::move(ts);
        break;
      }
      case ir::AttrType::Graph:
        if (!a.g) fail("graph attribute without a graph (", at, ")");
        j["g"] = graph(*a.g);
        break;
      case ir::AttrType::Graphs:
        fail("attributes holding lists of graphs are not supported in plans (", at, ")");
    }
    return j;
  }

  json attributes(const std::map<std::string, ir::Attribute>& attrs, const std::string& where) {
    json a = json::array();
    for (const auto& [key, attr] : attrs) a.push_back(attribute(key, attr, where));
    return a;
  }

  static json value_info(const ir::ValueInfo& v) {
    json shape = json::array();
    for (const auto& d : v.shape) shape.push_back(dim(d));
    return json{{"name", str(v.name)},
                {"dtype", static_cast<int32_t>(v.dtype)},
                {"has_shape", v.has_shape},
                {"shape", std::move(shape)}};
  }

  json graph(const ir::Graph& g) {
    json j;
    j["name"] = str(g.name);
    j["ir_version"] = g.ir_version;
    json opsets = json::array();
    for (const auto& [domain, version] : g.opsets) opsets.push_back(json::array({str(domain), version}));
    j["opsets"] = std::move(opsets);
    json ins = json::array(), outs = json::array();
    for (const auto& v : g.inputs) ins.push_back(value_info(v));
    for (const auto& v : g.outputs) outs.push_back(value_info(v));
    j["inputs"] = std::move(ins);
    j["outputs"] = std::move(outs);
    json nodes = json::array();
    for (const auto& n : g.nodes) {
      json jn;
      jn["name"] = str(n.name);
      jn["op_type"] = str(n.op_type);
      jn["domain"] = str(n.domain);
      jn["opset"] = n.opset;
      jn["inputs"] = strs(n.inputs);
      jn["outputs"] = strs(n.outputs);
      jn["attrs"] = attributes(n.attrs, n.label());
      jn["metadata"] = pairs(n.metadata);
      nodes.push_back(std::move(jn));
    }
    j["nodes"] = std::move(nodes);
    json inits = json::array();
    for (const auto& [name, t] : g.initializers)
      inits.push_back(json{{"name", str(name)}, {"tensor", tensor(t, "initializer '" + name + "'")}});
    j["initializers"] = std::move(inits);
    j["metadata"] = pairs(g.metadata);
    if (!g.captures.empty()) j["captures"] = strs(g.captures);
    return j;
  }

  static json checkpoint_inputs(const Binding& b) {
    json a = json::array();
    for (const auto& in : b.checkpoint) {
      a.push_back(json{{"name", str(in.name)}, {"dtype", static_cast<int32_t>(in.dtype)}, {"shape", ints(in.shape)}});
      // Optional: the checkpoint tensors tied to this one at build (copies of one parameter).
      if (!in.ties.empty()) a.back()["ties"] = strs(in.ties);
    }
    return a;
  }

  // `what` names the owner in errors ("source 'k'").
  json binding(const Binding& b, const std::string& what) {
    json steps = json::array();
    for (size_t i = 0; i < b.steps.size(); ++i) {
      const RecipeStep& st = b.steps[i];
      json inputs = json::array();
      for (const auto& o : st.inputs) inputs.push_back(operand(o));
      steps.push_back(json{{"op_type", str(st.op_type)},
                           {"opset", st.opset},
                           {"attrs", attributes(st.attrs, str_cat(what, " binding step ", i))},
                           {"inputs", std::move(inputs)}});
      // Optional: a reforge-domain step (a quantization) taking one output of several.
      if (!st.domain.empty()) steps.back()["domain"] = str(st.domain);
      if (st.output != 0) steps.back()["output"] = st.output;
      if (st.num_outputs > st.output + 1) steps.back()["num_outputs"] = st.num_outputs;
    }
    json j = json{{"status", binding_status_name(b.status)},
                  {"checkpoint", checkpoint_inputs(b)},
                  {"steps", std::move(steps)},
                  {"note", str(b.note)}};
    if (!b.literals.empty()) {
      json lits = json::array();
      for (size_t i = 0; i < b.literals.size(); ++i)
        lits.push_back(tensor(b.literals[i], str_cat(what, " binding literal ", i)));
      j["literals"] = std::move(lits);
    }
    if (b.status == Binding::Status::Constant) {
      j["reason"] = binding_reason_name(b.reason);
      j["rule"] = str(b.rule);
    }
    return j;
  }

  json source(const Source& s) {
    json j = json{{"key", str(s.key)},
                  {"names", strs(s.names)},
                  {"consumer", str(s.consumer)},
                  {"op_type", str(s.op_type)},
                  {"node_position", s.node_position},
                  {"slot", s.slot},
                  {"dtype", static_cast<int32_t>(s.dtype)},
                  {"shape", ints(s.shape)},
                  {"hash", hex64(s.hash)},
                  {"refittable", s.refittable}};
    // Written only when the plan was built with a checkpoint; older readers ignore it.
    if (s.binding.status != Binding::Status::None) j["binding"] = binding(s.binding, str_cat("source '", s.key, "'"));
    return j;
  }

  json weight(const WeightEntry& w) {
    std::string where = str_cat("weight '", w.name, "'");
    json j;
    j["name"] = str(w.name);
    j["kind"] = weight_kind_name(w.kind);
    j["dtype"] = static_cast<int32_t>(w.dtype);
    j["shape"] = ints(w.shape);
    json steps = json::array();
    for (size_t i = 0; i < w.recipe.steps.size(); ++i) {
      const RecipeStep& s = w.recipe.steps[i];
      json inputs = json::array();
      for (const auto& o : s.inputs) inputs.push_back(operand(o));
      steps.push_back(json{{"domain", str(s.domain)},
                           {"op_type", str(s.op_type)},
                           {"opset", s.opset},
                           {"attrs", attributes(s.attrs, str_cat(where, " recipe step ", i, " (", s.op_type, ")"))},
                           {"inputs", std::move(inputs)},
                           {"output", s.output}});
      // Written only when more outputs than `output + 1` are evaluated (the reader's default).
      if (s.num_outputs > s.output + 1) steps.back()["num_outputs"] = s.num_outputs;
    }
    j["recipe"] = json{{"steps", std::move(steps)}, {"result", operand(w.recipe.result)}};
    json srcs = json::array();
    for (uint32_t s : w.sources) srcs.push_back(s);
    j["sources"] = std::move(srcs);
    j["hash"] = hex64(w.hash);
    if (w.data.defined()) {
      check_storable(w.data, where);
      if (w.data.dtype() != w.dtype || w.data.shape() != w.shape)
        fail(where, ": data is ", w.data.describe(), " but the entry says ", dtype_name(w.dtype), shape_str(w.shape));
      j["data"] = data_ref(w.data);
      if (w.data.nbytes() > kPiece) j["data"]["xxh3_pieces"] = piece_hashes(w.data);
    } else {
      j["data"] = nullptr;
    }
    return j;
  }

  std::vector<Blob> blobs_;
  uint64_t data_size_ = 0;
};

// The encoded file before any byte of tensor data is copied: header, metadata and padding up to
// the data section (`prefix`), then the blobs at their offsets.
struct Encoded {
  std::string prefix;
  std::vector<Blob> blobs;
  uint64_t data_size = 0;
};

Encoded encode(const Plan& plan) {
  Encoder enc;
  std::string meta = enc.plan(plan).dump();  // strict UTF-8: every string went through str()
  Encoded out;
  uint64_t data_offset = align_up(kHeaderSize + meta.size());
  out.prefix.assign(data_offset, '\0');
  auto* h = reinterpret_cast<unsigned char*>(out.prefix.data());
  std::memcpy(h, kMagic, sizeof kMagic);
  put_u32(h + kOffVersion, written_format_version(plan));
  put_u32(h + kOffHeaderSize, static_cast<uint32_t>(kHeaderSize));
  put_u64(h + kOffMetaOffset, kHeaderSize);
  put_u64(h + kOffMetaSize, meta.size());
  put_u64(h + kOffDataOffset, data_offset);
  put_u64(h + kOffDataSize, enc.data_size());
  put_u64(h + kOffMetaHash, hash_bytes(meta.data(), meta.size()));
  put_u64(h + kOffHeaderHash, hash_bytes(h, kOffHeaderHash));
  std::memcpy(h + kHeaderSize, meta.data(), meta.size());
  out.blobs = enc.blobs();
  out.data_size = enc.data_size();
  return out;
}

// Streams the encoded file to `sink` in order, zero-filling the alignment gaps.
void emit(const Encoded& e, const std::function<void(const void*, size_t)>& sink) {
  static const char zeros[kAlign] = {};
  sink(e.prefix.data(), e.prefix.size());
  uint64_t pos = 0;
  for (const Blob& b : e.blobs) {
    REFORGE_ASSERT(b.offset >= pos && b.offset - pos < kAlign);
    if (b.offset > pos) sink(zeros, b.offset - pos);
    if (b.nbytes) sink(b.data, b.nbytes);
    pos = b.offset + b.nbytes;
  }
  REFORGE_ASSERT(pos == e.data_size);
}

}  // namespace

std::string serialize_plan(const Plan& plan) {
  Encoded e = encode(plan);
  std::string out;
  out.reserve(e.prefix.size() + e.data_size);
  emit(e, [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  return out;
}

void write_plan(const Plan& plan, const std::string& path, const ProgressCallback& progress) {
  // Everything that can fail on the plan's content fails here, before a file exists.
  Encoded e;
  {
    ProgressStep encoding(progress, "encoding the plan");
    e = encode(plan);
  }
  AtomicFile out(path, "plan");
  {
    ProgressStep writing(progress, "writing the plan", e.prefix.size() + e.data_size, "bytes");
    // Large weights go out in pieces, so that a counted report comes at least every 64 MiB.
    constexpr size_t kPiece = size_t{64} << 20;
    emit(e, [&](const void* p, size_t n) {
      for (size_t off = 0; off < n; off += kPiece) {
        const size_t len = std::min(kPiece, n - off);
        out.write(static_cast<const char*>(p) + off, len);
        writing.advance(len);
      }
    });
  }
  ProgressStep syncing(progress, "syncing to disk");
  out.commit();
}

}  // namespace reforge::plan
