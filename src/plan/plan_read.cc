// Plan reader: validates the header, checksums and every metadata field of an untrusted plan
// file and builds a Plan whose tensors wrap the mapped bytes (docs/plan-format.md). Nothing
// here trusts a size, an offset or an index from the file before checking it.
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/mapped_file.h"
#include "core/narrow.h"
#include "plan/plan_format.h"
#include "plan/plan_io.h"

namespace reforge::plan {
namespace {

using json = nlohmann::json;
using namespace format;

// ---- typed access to JSON values; every failure names the field ----

const json& field(const json& obj, const char* key, const std::string& where) {
  const std::string& w = where.empty() ? std::string("metadata") : where;
  if (!obj.is_object()) fail(w, ": expected an object");
  auto it = obj.find(key);
  if (it == obj.end()) fail(w, ": missing field '", key, "'");
  return *it;
}

std::string at(const std::string& where, const char* key) { return where.empty() ? key : where + "." + key; }
std::string at(const std::string& where, size_t i) { return str_cat(where, "[", i, "]"); }

std::string as_string(const json& j, const std::string& where) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.size() == 1 && j.contains("hex") && j["hex"].is_string()) {
    if (auto s = from_hex(j["hex"].get<std::string>())) return *s;
    fail(where, ": invalid hex string");
  }
  fail(where, ": expected a string");
}

int64_t as_i64(const json& j, const std::string& where) {
  if (j.is_number_unsigned()) {
    if (j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(where, ": integer out of range");
    return static_cast<int64_t>(j.get<uint64_t>());
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  fail(where, ": expected an integer");
}

uint64_t as_u64(const json& j, const std::string& where) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) fail(where, ": expected a non-negative integer, got ", j.get<int64_t>());
  fail(where, ": expected a non-negative integer");
}

uint32_t as_u32(const json& j, const std::string& where) {
  uint64_t v = as_u64(j, where);
  if (v > std::numeric_limits<uint32_t>::max()) fail(where, ": ", v, " is out of range");
  return static_cast<uint32_t>(v);
}

int as_int(const json& j, const std::string& where) {
  int64_t v = as_i64(j, where);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    fail(where, ": ", v, " is out of range");
  return static_cast<int>(v);
}

bool as_bool(const json& j, const std::string& where) {
  if (!j.is_boolean()) fail(where, ": expected true or false");
  return j.get<bool>();
}

const json& as_array(const json& j, const std::string& where) {
  if (!j.is_array()) fail(where, ": expected an array");
  return j;
}

std::string str_field(const json& obj, const char* key, const std::string& where) {
  return as_string(field(obj, key, where), at(where, key));
}

std::vector<std::string> strings(const json& j, const std::string& where) {
  std::vector<std::string> out;
  for (size_t i = 0; i < as_array(j, where).size(); ++i) out.push_back(as_string(j[i], at(where, i)));
  return out;
}

std::vector<int64_t> int64s(const json& j, const std::string& where) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < as_array(j, where).size(); ++i) out.push_back(as_i64(j[i], at(where, i)));
  return out;
}

std::vector<std::pair<std::string, std::string>> pairs(const json& j, const std::string& where) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < as_array(j, where).size(); ++i) {
    const json& p = j[i];
    if (!p.is_array() || p.size() != 2) fail(at(where, i), ": expected a [key, value] pair");
    out.emplace_back(as_string(p[0], at(where, i)), as_string(p[1], at(where, i)));
  }
  return out;
}

DType dtype_field(const json& obj, const std::string& where) {
  int code = as_int(field(obj, "dtype", where), at(where, "dtype"));
  if (code != 0 && dtype_from_onnx(code) == DType::Undefined)
    fail(at(where, "dtype"), ": unknown element type code ", code);
  return static_cast<DType>(code);
}

Shape shape_field(const json& obj, const std::string& where) {
  Shape s = int64s(field(obj, "shape", where), at(where, "shape"));
  for (int64_t d : s)
    if (d < 0) fail(at(where, "shape"), ": negative dimension ", d, " in ", shape_str(s));
  return s;
}

uint64_t hash_field(const json& obj, const char* key, const std::string& where) {
  std::string s = str_field(obj, key, where);
  if (auto v = parse_hex64(s)) return *v;
  fail(at(where, key), ": expected 16 hex digits, got '", s, "'");
}

Operand operand(const json& j, const std::string& where) {
  if (!j.is_array() || j.size() != 2) fail(where, ": expected [kind, index]");
  auto kind = operand_kind_from_name(as_string(j[0], where));
  if (!kind) fail(where, ": unknown operand kind ", j[0].dump());
  return Operand{*kind, as_u32(j[1], where)};
}

ir::Dim dim(const json& j, const std::string& where) {
  if (j.is_number()) return ir::Dim{as_i64(j, where), ""};
  if (j.is_array()) {
    if (j.size() != 2) fail(where, ": expected [value, symbol]");
    return ir::Dim{as_i64(j[0], where), as_string(j[1], where)};
  }
  return ir::Dim{-1, as_string(j, where)};
}

// A loaded weight's bytes and the hashes the plan records for them.
struct WeightCheck {
  size_t weight;  // index into Plan::weights
  const unsigned char* data;
  uint64_t nbytes;
  uint64_t recorded;  // the data ref's hash
  uint64_t expected;  // WeightEntry::hash
  uint64_t file_offset;
  std::vector<uint64_t> pieces;  // recorded hashes of its kPiece-byte pieces (large weights), or empty
};

// Builds Plan objects from the validated metadata; tensors wrap the data section.
class Decoder {
 public:
  Decoder(std::shared_ptr<const void> owner, const unsigned char* data, uint64_t data_offset, uint64_t size,
          const ReadOptions& options)
      : owner_(std::move(owner)), data_(data), data_offset_(data_offset), size_(size), options_(options) {}

  // Weight data still to hash (ReadOptions::verify_weight_hashes), in weight-table order.
  const std::vector<WeightCheck>& weight_checks() const { return checks_; }

  static BuildRecord build_record(const json& j, const std::string& where) {
    BuildRecord r;
    std::string packing = str_field(j, "weight_packing", where);
    auto wp = weight_packing_from_name(packing);
    if (!wp) fail(at(where, "weight_packing"), ": unknown weight packing '", packing, "'");
    r.weight_packing = *wp;
    r.skip_passes = strings(field(j, "skip_passes", where), at(where, "skip_passes"));
    r.verify_recipes = as_bool(field(j, "verify_recipes", where), at(where, "verify_recipes"));
    r.backend = str_field(j, "backend", where);
    if (j.contains("host_fallback")) r.host_fallback = as_bool(j["host_fallback"], at(where, "host_fallback"));
    if (j.contains("reference_rounding"))
      r.reference_rounding = as_bool(j["reference_rounding"], at(where, "reference_rounding"));
    r.isa = strings(field(j, "isa", where), at(where, "isa"));
    const std::string lw = at(where, "layouts");
    const json& l = field(j, "layouts", where);
    r.layouts.linear_panels = as_bool(field(l, "linear_panels", lw), at(lw, "linear_panels"));
    r.layouts.half_panels = as_bool(field(l, "half_panels", lw), at(lw, "half_panels"));
    if (l.contains("linear_transposed"))
      r.layouts.linear_transposed = as_bool(l["linear_transposed"], at(lw, "linear_transposed"));
    if (r.layouts.half_panels && !r.layouts.linear_panels)
      fail(lw, ": half_panels without linear_panels is not a layout a build makes");
    return r;
  }

  Plan plan(const json& j) {
    if (!j.is_object()) fail("metadata: expected a JSON object");
    Plan p;
    p.producer = str_field(j, "producer", "");
    p.model_name = str_field(j, "model_name", "");
    std::string mode = str_field(j, "mode", "");
    auto m = build_mode_from_name(mode);
    if (!m) fail("mode: unknown build mode '", mode, "'");
    p.mode = *m;
    // Optional: plans written before --precision existed are float32.
    if (j.contains("precision")) {
      std::string prec = str_field(j, "precision", "");
      auto pr = precision_from_name(prec);
      if (!pr) fail("precision: unknown precision '", prec, "'");
      p.precision = *pr;
    }
    // Optional: absent means float32 activations.
    if (j.contains("activations")) {
      std::string act = str_field(j, "activations", "");
      auto a = precision_from_name(act);
      if (!a || !activations_allowed(p.precision, *a))
        fail("activations: '", act, "' does not go with precision '", precision_name(p.precision),
             "' (bf16 activations need bf16 weights)");
      p.activations = *a;
    }
    // int4 plans only: the quantization block along K.
    if (p.precision == Precision::Int4) {
      p.block_size = as_i64(field(j, "block_size", ""), "block_size");
      if (p.block_size < 16 || p.block_size > (int64_t{1} << 20) || (p.block_size & (p.block_size - 1)) != 0)
        fail("block_size: ", p.block_size, " is not a power of two >= 16");
    } else if (j.contains("block_size")) {
      fail("block_size: given, but the precision is '", precision_name(p.precision), "' (only int4 has blocks)");
    }
    p.individual_patterns = strings(field(j, "individual_patterns", ""), "individual_patterns");
    p.literal_names = strings(field(j, "literal_names", ""), "literal_names");
    // Optional: written only for plans bound to a checkpoint that holds a --literal initializer.
    if (j.contains("literal_bindings")) {
      const json& lb = j["literal_bindings"];
      for (size_t i = 0; i < as_array(lb, "literal_bindings").size(); ++i) {
        const std::string w = at("literal_bindings", i);
        LiteralBinding b;
        b.name = str_field(lb[i], "name", w);
        if (std::find(p.literal_names.begin(), p.literal_names.end(), b.name) == p.literal_names.end())
          fail(w, ": '", b.name, "' is not one of literal_names");
        b.dtype = dtype_field(lb[i], w);
        b.shape = shape_field(lb[i], w);
        b.hash = hash_field(lb[i], "hash", w);
        b.binding = binding(field(lb[i], "binding", w), at(w, "binding"));
        if (b.binding.status != Binding::Status::Bound) fail(at(w, "binding"), ": a literal's binding must be bound");
        p.literal_bindings.push_back(std::move(b));
      }
    }
    p.stripped = as_bool(field(j, "stripped", ""), "stripped");
    // Optional: plans written before the build record existed have none.
    if (j.contains("build")) p.build = build_record(j["build"], "build");
    p.graph = graph(field(j, "graph", ""), "graph");
    // Optional: plans written before placement was recorded run every node on their backend.
    if (j.contains("placement")) {
      p.placement = strings(j["placement"], "placement");
      if (p.placement.size() != p.graph.nodes.size())
        fail("placement: ", p.placement.size(), " entries for ", p.graph.nodes.size(), " nodes");
      for (size_t i = 0; i < p.placement.size(); ++i)
        if (p.placement[i].empty()) fail(at("placement", i), ": empty backend name");
    } else {
      p.placement = node_backends(p);
    }
    const json& lits = as_array(field(j, "literals", ""), "literals");
    for (size_t i = 0; i < lits.size(); ++i) p.literals.push_back(tensor(lits[i], at("literals", i)));
    const json& srcs = as_array(field(j, "sources", ""), "sources");
    for (size_t i = 0; i < srcs.size(); ++i) p.sources.push_back(source(srcs[i], at("sources", i)));
    const json& ws = as_array(field(j, "weights", ""), "weights");
    for (size_t i = 0; i < ws.size(); ++i) p.weights.push_back(weight(ws[i], at("weights", i), p));
    p.fingerprint = strings(field(j, "fingerprint", ""), "fingerprint");
    // Optional: plans written before value types were recorded have none.
    if (j.contains("values")) p.values = value_types(j["values"], p.graph);
    return p;
  }

 private:
  // Checks a data reference against the data section; returns a pointer to its first byte.
  const unsigned char* data_ref(const json& j, const std::string& where, DType dtype, const Shape& shape,
                                uint64_t* recorded_hash) {
    if (!has_storage(dtype)) fail(where, ": tensors of type ", dtype_name(dtype), " cannot hold data");
    uint64_t offset = as_u64(field(j, "offset", where), at(where, "offset"));
    uint64_t nbytes = as_u64(field(j, "nbytes", where), at(where, "nbytes"));
    *recorded_hash = hash_field(j, "xxh3", where);
    uint64_t numel = 0;
    try {
      numel = static_cast<uint64_t>(shape_numel(shape));
    } catch (const Error& e) {
      fail(where, ": ", e.message());
    }
    uint64_t esize = dtype_size(dtype);
    if (numel > std::numeric_limits<uint64_t>::max() / esize || numel * esize != nbytes)
      fail(where, ": ", nbytes, " bytes stored, but ", dtype_name(dtype), shape_str(shape), " needs ", numel, " x ",
           esize, " bytes");
    if (offset % kAlign != 0) fail(where, ": offset ", offset, " is not a multiple of ", kAlign);
    if (offset > size_ || nbytes > size_ - offset)
      fail(where, ": bytes [", offset, ", ", offset, "+", nbytes, ") lie past the end of the data section (", size_,
           " bytes)");
    return data_ + offset;
  }

  void verify(const unsigned char* p, uint64_t n, uint64_t recorded, const std::string& where) {
    if (hash_bytes(p, n) != recorded) fail(where, ": data hash mismatch: the file is corrupted");
  }

  // A tensor of the structure (attribute, literal, initializer): always loaded and verified.
  Tensor tensor(const json& j, const std::string& where) {
    if (j.is_null()) return Tensor();
    DType dt = dtype_field(j, where);
    Shape shape = shape_field(j, where);
    uint64_t recorded = 0;
    const unsigned char* p = data_ref(j, where, dt, shape, &recorded);
    Tensor t = Tensor::wrap(dt, std::move(shape), owner_, p);
    verify(p, t.nbytes(), recorded, where);
    return t;
  }

  ir::Attribute attribute(const json& j, const std::string& where, std::string* key) {
    ir::Attribute a;
    a.name = str_field(j, "name", where);
    *key = j.is_object() && j.contains("key") ? str_field(j, "key", where) : a.name;
    std::string w = where + " ('" + *key + "')";
    std::string type = str_field(j, "type", w);
    auto t = attr_type_from_name(type);
    if (!t) fail(w, ": unknown attribute type '", type, "'");
    a.type = *t;
    switch (a.type) {
      case ir::AttrType::Undefined:
        break;
      case ir::AttrType::Float:
        a.f = bits_to_float(as_u32(field(j, "f", w), at(w, "f")));
        break;
      case ir::AttrType::Int:
        a.i = as_i64(field(j, "i", w), at(w, "i"));
        break;
      case ir::AttrType::String:
        a.s = str_field(j, "s", w);
        break;
      case ir::AttrType::Tensor:
        a.t = tensor(field(j, "t", w), at(w, "t"));
        break;
      case ir::AttrType::Floats: {
        const json& f = as_array(field(j, "floats", w), at(w, "floats"));
        for (size_t i = 0; i < f.size(); ++i) a.floats.push_back(bits_to_float(as_u32(f[i], at(at(w, "floats"), i))));
        break;
      }
      case ir::AttrType::Ints:
        a.ints = int64s(field(j, "ints", w), at(w, "ints"));
        break;
      case ir::AttrType::Strings:
        a.strings = strings(field(j, "strings", w), at(w, "strings"));
        break;
      case ir::AttrType::Tensors: {
        const json& ts = as_array(field(j, "tensors", w), at(w, "tensors"));
        for (size_t i = 0; i < ts.size(); ++i) a.tensors.push_back(tensor(ts[i], at(at(w, "tensors"), i)));
        break;
      }
      case ir::AttrType::Graph: {
        if (++graph_depth_ > kMaxGraphDepth) fail(w, ": subgraphs nested more than ", kMaxGraphDepth, " deep");
        a.g = std::make_shared<ir::Graph>(graph(field(j, "g", w), at(w, "g")));
        --graph_depth_;
        break;
      }
      case ir::AttrType::Graphs:
        fail(w, ": attributes holding lists of graphs are not supported in plans");
    }
    return a;
  }

  std::map<std::string, ir::Attribute> attributes(const json& j, const std::string& where) {
    std::map<std::string, ir::Attribute> out;
    for (size_t i = 0; i < as_array(j, where).size(); ++i) {
      std::string key;
      ir::Attribute a = attribute(j[i], at(where, i), &key);
      if (!out.emplace(key, std::move(a)).second) fail(at(where, i), ": duplicate attribute '", key, "'");
    }
    return out;
  }

  ir::ValueInfo value_info(const json& j, const std::string& where) {
    ir::ValueInfo v;
    v.name = str_field(j, "name", where);
    v.dtype = dtype_field(j, where);
    v.has_shape = as_bool(field(j, "has_shape", where), at(where, "has_shape"));
    const json& s = as_array(field(j, "shape", where), at(where, "shape"));
    for (size_t i = 0; i < s.size(); ++i) v.shape.push_back(dim(s[i], at(at(where, "shape"), i)));
    return v;
  }

  // Plan::values: each names a graph input or node output of `g`, at most once.
  std::vector<ir::ValueInfo> value_types(const json& j, const ir::Graph& g) {
    std::set<std::string> known, seen;
    for (const auto& in : g.inputs) known.insert(in.name);
    for (const auto& n : g.nodes)
      for (const auto& o : n.outputs)
        if (!o.empty()) known.insert(o);
    std::vector<ir::ValueInfo> out;
    const json& a = as_array(j, "values");
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string w = at("values", i);
      ir::ValueInfo v = value_info(a[i], w);
      if (!known.count(v.name)) fail(w, ": '", v.name, "' is not a graph input or node output");
      if (!seen.insert(v.name).second) fail(w, ": '", v.name, "' is listed twice");
      if (!v.has_shape && !v.shape.empty()) fail(w, ": a value of unknown rank has no dimensions");
      out.push_back(std::move(v));
    }
    return out;
  }

  ir::Graph graph(const json& j, const std::string& where) {
    ir::Graph g;
    g.name = str_field(j, "name", where);
    g.ir_version = as_i64(field(j, "ir_version", where), at(where, "ir_version"));
    const json& ops = as_array(field(j, "opsets", where), at(where, "opsets"));
    for (size_t i = 0; i < ops.size(); ++i) {
      std::string w = at(at(where, "opsets"), i);
      if (!ops[i].is_array() || ops[i].size() != 2) fail(w, ": expected [domain, version]");
      std::string domain = as_string(ops[i][0], w);
      if (!g.opsets.emplace(domain, as_int(ops[i][1], w)).second) fail(w, ": duplicate domain '", domain, "'");
    }
    const json& ins = as_array(field(j, "inputs", where), at(where, "inputs"));
    for (size_t i = 0; i < ins.size(); ++i) g.inputs.push_back(value_info(ins[i], at(at(where, "inputs"), i)));
    const json& outs = as_array(field(j, "outputs", where), at(where, "outputs"));
    for (size_t i = 0; i < outs.size(); ++i) g.outputs.push_back(value_info(outs[i], at(at(where, "outputs"), i)));
    const json& nodes = as_array(field(j, "nodes", where), at(where, "nodes"));
    for (size_t i = 0; i < nodes.size(); ++i) {
      const json& jn = nodes[i];
      std::string w = at(at(where, "nodes"), i);
      ir::Node n;
      n.name = str_field(jn, "name", w);
      w += " ('" + n.name + "')";
      n.op_type = str_field(jn, "op_type", w);
      n.domain = str_field(jn, "domain", w);
      n.opset = as_int(field(jn, "opset", w), at(w, "opset"));
      n.inputs = strings(field(jn, "inputs", w), at(w, "inputs"));
      n.outputs = strings(field(jn, "outputs", w), at(w, "outputs"));
      n.attrs = attributes(field(jn, "attrs", w), at(w, "attrs"));
      n.metadata = pairs(field(jn, "metadata", w), at(w, "metadata"));
      g.nodes.push_back(std::move(n));
    }
    const json& inits = as_array(field(j, "initializers", where), at(where, "initializers"));
    for (size_t i = 0; i < inits.size(); ++i) {
      std::string w = at(at(where, "initializers"), i);
      std::string name = str_field(inits[i], "name", w);
      if (!g.initializers.emplace(name, tensor(field(inits[i], "tensor", w), at(w, "tensor"))).second)
        fail(w, ": duplicate initializer '", name, "'");
    }
    g.metadata = pairs(field(j, "metadata", where), at(where, "metadata"));
    if (j.contains("captures")) g.captures = strings(j["captures"], at(where, "captures"));
    return g;
  }

  Source source(const json& j, const std::string& where) {
    Source s;
    s.key = str_field(j, "key", where);
    std::string w = where + " ('" + s.key + "')";
    s.names = strings(field(j, "names", w), at(w, "names"));
    s.consumer = str_field(j, "consumer", w);
    s.op_type = str_field(j, "op_type", w);
    s.node_position = as_u32(field(j, "node_position", w), at(w, "node_position"));
    s.slot = as_u32(field(j, "slot", w), at(w, "slot"));
    s.dtype = dtype_field(j, w);
    s.shape = shape_field(j, w);
    s.hash = hash_field(j, "hash", w);
    s.refittable = as_bool(field(j, "refittable", w), at(w, "refittable"));
    if (j.contains("binding")) s.binding = binding(j["binding"], at(w, "binding"));
    return s;
  }

  Binding binding(const json& j, const std::string& where) {
    Binding b;
    std::string status = str_field(j, "status", where);
    if (status == "bound")
      b.status = Binding::Status::Bound;
    else if (status == "unbound")
      b.status = Binding::Status::Unbound;
    else if (status == "constant")
      b.status = Binding::Status::Constant;
    else if (status != "none")
      fail(at(where, "status"), ": unknown binding status '", status, "'");
    if (j.contains("literals")) {
      const json& lits = as_array(j["literals"], at(where, "literals"));
      for (size_t i = 0; i < lits.size(); ++i) {
        Tensor t = tensor(lits[i], at(at(where, "literals"), i));
        if (!t.defined()) fail(at(at(where, "literals"), i), ": a binding literal has no data");
        b.literals.push_back(std::move(t));
      }
    }
    if (b.status == Binding::Status::Constant) {
      std::string reason = str_field(j, "reason", where);
      if (reason == "structural")
        b.reason = Binding::Reason::Structural;
      else if (reason == "proven")
        b.reason = Binding::Reason::Proven;
      else if (reason == "user")
        b.reason = Binding::Reason::User;
      else
        fail(at(where, "reason"), ": unknown constant reason '", reason, "'");
      b.rule = str_field(j, "rule", where);
      if (b.literals.empty()) fail(where, ": a constant source has no value");
    }
    const json& ins = as_array(field(j, "checkpoint", where), at(where, "checkpoint"));
    for (size_t i = 0; i < ins.size(); ++i) {
      std::string iw = at(at(where, "checkpoint"), i);
      Binding::Input in;
      in.name = str_field(ins[i], "name", iw);
      in.dtype = dtype_field(ins[i], iw);
      in.shape = shape_field(ins[i], iw);
      // Optional: written only for a checkpoint tensor that had tied copies at build.
      if (ins[i].contains("ties")) {
        in.ties = strings(ins[i]["ties"], at(iw, "ties"));
        for (size_t k = 0; k < in.ties.size(); ++k)
          if (in.ties[k].empty() || in.ties[k] == in.name)
            fail(at(at(iw, "ties"), k), ": a tie names ", in.ties[k].empty() ? "no tensor" : "the tensor itself");
      }
      b.checkpoint.push_back(std::move(in));
    }
    b.note = str_field(j, "note", where);
    const json& steps = as_array(field(j, "steps", where), at(where, "steps"));
    for (size_t i = 0; i < steps.size(); ++i) {
      std::string sw = at(at(where, "steps"), i);
      RecipeStep st;
      if (steps[i].contains("domain")) st.domain = str_field(steps[i], "domain", sw);
      st.op_type = str_field(steps[i], "op_type", sw);
      st.opset = as_int(field(steps[i], "opset", sw), at(sw, "opset"));
      st.attrs = attributes(field(steps[i], "attrs", sw), at(sw, "attrs"));
      if (steps[i].contains("output")) st.output = as_u32(steps[i]["output"], at(sw, "output"));
      st.num_outputs = st.output + 1;
      if (steps[i].contains("num_outputs")) {
        st.num_outputs = as_u32(steps[i]["num_outputs"], at(sw, "num_outputs"));
        if (st.num_outputs <= st.output)
          fail(at(sw, "num_outputs"), ": ", st.num_outputs, " outputs do not include output ", st.output);
      }
      const json& ins = as_array(field(steps[i], "inputs", sw), at(sw, "inputs"));
      for (size_t k = 0; k < ins.size(); ++k) {
        Operand o = operand(ins[k], at(at(sw, "inputs"), k));
        size_t limit = o.kind == Operand::Kind::Source    ? b.checkpoint.size()
                       : o.kind == Operand::Kind::Step    ? i
                       : o.kind == Operand::Kind::Literal ? b.literals.size()
                                                          : 0;
        if (o.index >= limit) fail(at(at(sw, "inputs"), k), ": operand ", o.index, " does not exist");
        st.inputs.push_back(o);
      }
      b.steps.push_back(std::move(st));
    }
    if (b.status == Binding::Status::Bound && b.checkpoint.empty())
      fail(where, ": a bound source names no checkpoint tensor");
    return b;
  }

  void check_operand(const Operand& o, const Plan& p, size_t steps_before, const std::string& where) {
    size_t limit = o.kind == Operand::Kind::Source    ? p.sources.size()
                   : o.kind == Operand::Kind::Literal ? p.literals.size()
                                                      : steps_before;
    if (o.index >= limit)
      fail(where, ": ", operand_kind_name(o.kind), " ", o.index, " does not exist (",
           o.kind == Operand::Kind::Step ? "earlier steps: " : "count: ", limit, ")");
  }

  WeightEntry weight(const json& j, const std::string& where, const Plan& p) {
    WeightEntry w;
    w.name = str_field(j, "name", where);
    std::string wh = where + " ('" + w.name + "')";
    std::string kind = str_field(j, "kind", wh);
    auto k = weight_kind_from_name(kind);
    if (!k) fail(at(wh, "kind"), ": unknown weight kind '", kind, "'");
    w.kind = *k;
    w.dtype = dtype_field(j, wh);
    w.shape = shape_field(j, wh);
    const json& recipe = field(j, "recipe", wh);
    std::string rw = at(wh, "recipe");
    const json& steps = as_array(field(recipe, "steps", rw), at(rw, "steps"));
    for (size_t i = 0; i < steps.size(); ++i) {
      const json& js = steps[i];
      std::string sw = at(at(rw, "steps"), i);
      RecipeStep s;
      s.domain = str_field(js, "domain", sw);
      s.op_type = str_field(js, "op_type", sw);
      s.opset = as_int(field(js, "opset", sw), at(sw, "opset"));
      s.attrs = attributes(field(js, "attrs", sw), at(sw, "attrs"));
      const json& ins = as_array(field(js, "inputs", sw), at(sw, "inputs"));
      for (size_t k2 = 0; k2 < ins.size(); ++k2) {
        s.inputs.push_back(operand(ins[k2], at(at(sw, "inputs"), k2)));
        check_operand(s.inputs.back(), p, i, at(at(sw, "inputs"), k2));
      }
      s.output = as_u32(field(js, "output", sw), at(sw, "output"));
      s.num_outputs = s.output + 1;
      if (js.contains("num_outputs")) {
        s.num_outputs = as_u32(js["num_outputs"], at(sw, "num_outputs"));
        if (s.num_outputs <= s.output)
          fail(at(sw, "num_outputs"), ": ", s.num_outputs, " outputs do not include output ", s.output);
      }
      w.recipe.steps.push_back(std::move(s));
    }
    w.recipe.result = operand(field(recipe, "result", rw), at(rw, "result"));
    // A literal's recipe is empty and its result unused; every other result must resolve.
    if (w.kind != WeightKind::Literal || !w.recipe.steps.empty())
      check_operand(w.recipe.result, p, w.recipe.steps.size(), at(rw, "result"));
    const json& srcs = as_array(field(j, "sources", wh), at(wh, "sources"));
    for (size_t i = 0; i < srcs.size(); ++i) {
      uint32_t s = as_u32(srcs[i], at(at(wh, "sources"), i));
      if (s >= p.sources.size())
        fail(at(at(wh, "sources"), i), ": source ", s, " does not exist (count: ", p.sources.size(), ")");
      w.sources.push_back(s);
    }
    w.hash = hash_field(j, "hash", wh);
    const json& data = field(j, "data", wh);
    if (!data.is_null()) {
      uint64_t recorded = 0;
      const unsigned char* ptr = data_ref(data, at(wh, "data"), w.dtype, w.shape, &recorded);
      if (options_.load_weights) {
        w.data = Tensor::wrap(w.dtype, w.shape, owner_, ptr);
        // Hashed later, all weights at once and in parallel (verify_weight_data).
        if (options_.verify_weight_hashes) {
          checks_.push_back({p.weights.size(),
                             ptr,
                             w.data.nbytes(),
                             recorded,
                             w.hash,
                             data_offset_ + static_cast<uint64_t>(ptr - data_),
                             {}});
          if (data.contains("xxh3_pieces")) {
            const json& pieces = as_array(data["xxh3_pieces"], at(at(wh, "data"), "xxh3_pieces"));
            const uint64_t n = w.data.nbytes(), want = n > kPiece ? (n + kPiece - 1) / kPiece : 0;
            if (pieces.size() != want)
              fail(at(at(wh, "data"), "xxh3_pieces"), ": ", pieces.size(), " piece hashes for ", n, " bytes (expected ",
                   want, ")");
            for (size_t k = 0; k < pieces.size(); ++k) {
              auto v = pieces[k].is_string() ? parse_hex64(pieces[k].get<std::string>()) : std::nullopt;
              if (!v) fail(at(at(at(wh, "data"), "xxh3_pieces"), k), ": expected 16 hex digits");
              checks_.back().pieces.push_back(*v);
            }
          }
        }
      }
    }
    return w;
  }

  std::shared_ptr<const void> owner_;
  // Subgraphs inside subgraphs: bounded so that a hostile file cannot exhaust the stack.
  static constexpr int kMaxGraphDepth = 32;
  int graph_depth_ = 0;
  const unsigned char* data_;  // the data section
  uint64_t data_offset_;       // its offset in the file
  uint64_t size_;
  ReadOptions options_;
  std::vector<WeightCheck> checks_;
};

// Maps [p, p + n) of a file mapping into the page tables (reading it from disk where it is not
// in the page cache). One madvise instead of a page fault per page; where the kernel lacks
// MADV_POPULATE_READ (before Linux 5.14), one read per page does the same.
void populate(const unsigned char* p, uint64_t n) {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  if (n == 0 ||
      ::madvise(reinterpret_cast<void*>(begin), reinterpret_cast<uintptr_t>(p) + n - begin, MADV_POPULATE_READ) == 0)
    return;
  unsigned char sum = 0;
  for (uint64_t i = 0; i < n; i += page) sum = static_cast<unsigned char>(sum + p[i]);
  volatile unsigned char sink = sum;
  (void)sink;
}

// Hashes every weight's bytes and fails naming each weight whose bytes do not hash to what the
// plan records (its data ref's hash and WeightEntry::hash, which a well-formed file keeps equal).
// One parallel pass over the OpenMP threads: a weight larger than kPiece records the hash of each
// of its pieces, so one large weight (a 130 MB embedding) is paged in and hashed by all threads
// at once, and a cold file is read with many requests in flight, each piece hashed while it is
// hot; smaller weights (and plans written before piece hashes) are paged in and hashed whole, the
// largest first. The first run would otherwise pay for paging in what it reads.
void verify_weight_data(const Plan& plan, const std::vector<WeightCheck>& checks) {
  if (checks.empty()) return;
  // Work items: every piece of a weight that records piece hashes (paged in and hashed by one
  // thread, in one pass), then every other weight whole, the largest first.
  struct Item {
    size_t check;
    int64_t piece;  // -1: the whole weight
  };
  std::vector<Item> items;
  for (size_t i = 0; i < checks.size(); ++i)
    for (size_t k = 0; k < checks[i].pieces.size(); ++k) items.push_back({i, static_cast<int64_t>(k)});
  std::vector<size_t> whole;
  for (size_t i = 0; i < checks.size(); ++i)
    if (checks[i].pieces.empty()) whole.push_back(i);
  std::stable_sort(whole.begin(), whole.end(), [&](size_t a, size_t b) { return checks[a].nbytes > checks[b].nbytes; });
  for (size_t i : whole) items.push_back({i, -1});
  std::vector<uint64_t> actual(checks.size());
  std::vector<std::vector<uint64_t>> actual_pieces(checks.size());
  for (size_t i = 0; i < checks.size(); ++i) actual_pieces[i].resize(checks[i].pieces.size());
  const int64_t nitems = static_cast<int64_t>(items.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t k = 0; k < nitems; ++k) {
    const Item& it = items[static_cast<size_t>(k)];
    const WeightCheck& c = checks[it.check];
    if (it.piece >= 0) {
      const uint64_t off = static_cast<uint64_t>(it.piece) * kPiece, len = std::min(kPiece, c.nbytes - off);
      populate(c.data + off, len);
      actual_pieces[it.check][static_cast<size_t>(it.piece)] = hash_bytes(c.data + off, len);
    } else {
      for (uint64_t off = 0; off < c.nbytes; off += kPiece) populate(c.data + off, std::min(kPiece, c.nbytes - off));
      actual[it.check] = hash_bytes(c.data, c.nbytes);
    }
  }
  std::vector<std::string> bad;
  for (size_t i = 0; i < checks.size(); ++i) {
    const WeightCheck& c = checks[i];
    const WeightEntry& w = plan.weights[c.weight];
    if (!c.pieces.empty()) {
      size_t k = 0;
      while (k < c.pieces.size() && c.pieces[k] == actual_pieces[i][k]) ++k;
      // The pieces vouch for the bytes; the whole-data hash must still be the weight's own.
      actual[i] = k == c.pieces.size() ? c.recorded : ~c.recorded;
      if (k < c.pieces.size()) {
        std::string from =
            str_cat("engine weight '", w.name, "' (", weight_kind_name(w.kind), " ", dtype_name(w.dtype),
                    shape_str(w.shape), "; weights[", c.weight, "], file bytes [", c.file_offset + k * kPiece, ", ",
                    c.file_offset + std::min<uint64_t>(c.nbytes, (k + 1) * kPiece), "))");
        bad.push_back(str_cat(from, ": data hash mismatch in piece ", k, " of ", c.pieces.size(),
                              ": its bytes hash to ", hex64(actual_pieces[i][k]), ", the plan records ",
                              hex64(c.pieces[k])));
        continue;
      }
    }
    if (actual[i] == c.recorded && c.recorded == c.expected) continue;
    std::string from;
    for (size_t k = 0; k < w.sources.size() && k < 3; ++k)
      from += str_cat(k ? ", '" : " from '",
                      plan.sources[w.sources[k]].names.empty() ? plan.sources[w.sources[k]].key
                                                               : plan.sources[w.sources[k]].names[0],
                      "'");
    if (w.sources.size() > 3) from += ", ...";
    std::string where = str_cat("engine weight '", w.name, "' (", weight_kind_name(w.kind), " ", dtype_name(w.dtype),
                                shape_str(w.shape), from, "; weights[", c.weight, "], file bytes [", c.file_offset,
                                ", ", c.file_offset + c.nbytes, "))");
    if (actual[i] != c.recorded)
      bad.push_back(str_cat(where, ": data hash mismatch: its bytes hash to ", hex64(actual[i]), ", the plan records ",
                            hex64(c.recorded)));
    else
      bad.push_back(str_cat(where, ": data hash ", hex64(c.recorded), " differs from the weight's recorded hash ",
                            hex64(c.expected)));
  }
  if (bad.empty()) return;
  std::string msg = bad.size() == 1 ? bad[0] : str_cat(bad.size(), " engine weights are corrupted:");
  for (size_t i = 0; bad.size() > 1 && i < bad.size() && i < 10; ++i) msg += "\n  " + bad[i];
  if (bad.size() > 10) msg += str_cat("\n  ... and ", bad.size() - 10, " more");
  fail(msg, bad.size() == 1 ? "; the file is corrupted" : "\nthe file is corrupted");
}

}  // namespace

Plan parse_plan(std::shared_ptr<const void> owner, const void* data, size_t size, const ReadOptions& options,
                const std::string& what) {
  if (size == 0) fail(what, " is empty");
  if (data == nullptr) fail(what, ": no data");
  // Tensors must be 64-byte aligned; a buffer that is not (a std::string, a vector) is copied.
  if (reinterpret_cast<uintptr_t>(data) % kAlign != 0) {
    void* copy = nullptr;
    if (::posix_memalign(&copy, kAlign, size) != 0) fail(what, ": out of memory copying ", size, " bytes");
    std::memcpy(copy, data, size);
    owner = std::shared_ptr<const void>(copy, [](const void* q) { std::free(const_cast<void*>(q)); });
    data = copy;
  }
  const auto* p = static_cast<const unsigned char*>(data);

  if (std::memcmp(p, kMagic, std::min(size, sizeof kMagic)) != 0)
    fail(what, " is not a reforge plan (wrong magic bytes)");
  if (size < kOffVersion + 4) fail(what, " is truncated: ", size, " bytes, the header alone has ", kHeaderSize);
  // Magic and version keep their place in every format version, so this check always applies.
  uint32_t version = get_u32(p + kOffVersion);
  if (version > kFormatVersion)
    fail(what, " has format version ", version, "; this reforge reads up to ", kFormatVersion);
  if (version == 0) fail(what, " has invalid format version 0");
  if (size < kHeaderSize) fail(what, " is truncated: ", size, " bytes, the header alone has ", kHeaderSize);
  if (get_u64(p + kOffHeaderHash) != hash_bytes(p, kOffHeaderHash))
    fail(what, ": header checksum mismatch: the file is corrupted");

  uint32_t header_size = get_u32(p + kOffHeaderSize);
  uint64_t meta_offset = get_u64(p + kOffMetaOffset), meta_size = get_u64(p + kOffMetaSize);
  uint64_t data_offset = get_u64(p + kOffDataOffset), data_size = get_u64(p + kOffDataSize);
  if (header_size != kHeaderSize || meta_offset != kHeaderSize)
    fail(what, ": invalid header (header size ", header_size, ")");
  if (data_offset % kAlign != 0 || data_offset < meta_offset || meta_size > data_offset - meta_offset)
    fail(what, ": invalid header (metadata at ", meta_offset, "+", meta_size, ", data at ", data_offset, ")");
  if (data_size > std::numeric_limits<uint64_t>::max() - data_offset)
    fail(what, ": invalid header (data section size ", data_size, ")");
  if (size < data_offset + data_size)
    fail(what, " is truncated: ", size, " bytes, the header says ", data_offset + data_size);
  if (size > data_offset + data_size)
    fail(what, " has ", size - (data_offset + data_size), " unexpected bytes after its data section");
  const char* meta = reinterpret_cast<const char*>(p + meta_offset);
  if (get_u64(p + kOffMetaHash) != hash_bytes(meta, meta_size))
    fail(what, ": metadata checksum mismatch: the file is corrupted");

  json j;
  try {
    j = json::parse(meta, meta + meta_size);
  } catch (const json::exception& e) {
    fail(what, ": metadata is not valid JSON: ", e.what());
  }
  try {
    Decoder dec(std::move(owner), p + data_offset, data_offset, data_size, options);
    Plan plan = dec.plan(j);
    plan.format_version = version;
    verify_weight_data(plan, dec.weight_checks());
    return plan;
  } catch (const Error& e) {
    Error outer(str_cat(what, ": ", e.message()));
    for (const auto& c : e.context()) outer.with_context(c);
    throw outer;
  } catch (const json::exception& e) {
    fail(what, ": invalid metadata: ", e.what());
  }
}

Plan read_plan(const std::string& path, const ReadOptions& options) {
  auto file = MappedFile::open(path, "plan");
  return parse_plan(file, file->data(), file->size(), options, "plan '" + path + "'");
}

}  // namespace reforge::plan
