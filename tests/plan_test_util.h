// Shared by the plan format tests: a hand-built Plan that uses every field (several dtypes, a
// stripped weight, NaN/-0.0 attributes, non-UTF-8 strings, a two-step recipe), a field-by-field
// bit-exact comparison, and helpers to parse and patch plan bytes.
#pragma once

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "plan/plan_io.h"

namespace plan_test {

using namespace reforge;
using namespace reforge::plan;
using json = nlohmann::json;
namespace fs = std::filesystem;

template <typename T>
inline Tensor make(DType dt, Shape shape, std::vector<T> values) {
  Tensor t = Tensor::empty(dt, std::move(shape));
  EXPECT_EQ(t.nbytes(), values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.mutable_raw(), values.data(), t.nbytes());
  return t;
}

inline uint64_t hash_of(const Tensor& t) { return XXH3_64bits(t.raw(), t.nbytes()); }

inline ir::Attribute attr(const std::string& name, ir::AttrType type) {
  ir::Attribute a;
  a.name = name;
  a.type = type;
  return a;
}

inline const float kNaNPayload = bits_to_float(0x7fc01234u);
inline const float kNegNaN = bits_to_float(0xffc00001u);

inline Plan sample_plan() {
  Plan p;
  p.mode = BuildMode::RefitIndividual;
  p.precision = Precision::Bf16;
  p.individual_patterns = {"model.layers.*.mlp.*", "lm_head.weight"};
  p.stripped = true;
  p.producer = "reforge 0.1-test";
  p.model_name = "tiny \xc3\xa9t\xc3\xa9 model";  // UTF-8

  ir::Graph& g = p.graph;
  g.name = "tiny";
  g.ir_version = 10;
  g.opsets = {{"", 17}, {"com.microsoft", 1}};
  g.inputs.push_back({"x", DType::Float32, true, {{-1, "batch"}, {4, ""}, {-1, ""}, {3, "n"}}});
  g.inputs.push_back({"mask", DType::Bool, false, {}});
  g.outputs.push_back({"y", DType::Float32, true, {{-1, "batch"}, {3, ""}}});
  g.metadata = {{"exporter", "torch"}, {"note", "b\xff\xfe"}};  // invalid UTF-8 value

  ir::Node cos;
  cos.name = "fill";
  cos.op_type = "ConstantOfShape";
  cos.opset = 17;
  cos.inputs = {"shape_lit"};
  cos.outputs = {"filled"};
  ir::Attribute value = attr("value", ir::AttrType::Tensor);
  value.t = make<float>(DType::Float32, {1}, {2.5f});
  cos.attrs["value"] = value;
  g.nodes.push_back(cos);

  ir::Node mm;
  mm.name = "fc";
  mm.op_type = "MatMul";
  mm.opset = 17;
  mm.inputs = {"x", "w0"};
  mm.outputs = {"h"};
  mm.metadata = {{"pkg.torch.onnx.name_scopes", "['', 'fc']"}};
  g.nodes.push_back(mm);

  ir::Node odd;
  odd.name = "odd";
  odd.op_type = "Custom";
  odd.domain = "com.microsoft";
  odd.opset = 1;
  odd.inputs = {"h", "", "filled"};
  odd.outputs = {"y", ""};
  ir::Attribute alpha = attr("alpha", ir::AttrType::Float);
  alpha.f = kNaNPayload;
  odd.attrs["alpha"] = alpha;
  ir::Attribute negz = attr("negz", ir::AttrType::Float);
  negz.f = -0.0f;
  odd.attrs["negz"] = negz;
  ir::Attribute fl = attr("floats", ir::AttrType::Floats);
  fl.floats = {-0.0f,
               std::numeric_limits<float>::infinity(),
               -std::numeric_limits<float>::infinity(),
               kNegNaN,
               1e-45f,
               3.4028235e38f,
               0.1f};
  odd.attrs["floats"] = fl;
  ir::Attribute in = attr("i", ir::AttrType::Int);
  in.i = std::numeric_limits<int64_t>::min();
  odd.attrs["i"] = in;
  ir::Attribute is = attr("ints", ir::AttrType::Ints);
  is.ints = {std::numeric_limits<int64_t>::max(), -1, 0};
  odd.attrs["ints"] = is;
  ir::Attribute s = attr("s", ir::AttrType::String);
  s.s = std::string("\xff\x00raw", 5);  // bytes, not UTF-8
  odd.attrs["s"] = s;
  ir::Attribute ss = attr("strings", ir::AttrType::Strings);
  ss.strings = {"a", "", "\xe2\x82\xac"};
  odd.attrs["strings"] = ss;
  ir::Attribute ts = attr("tensors", ir::AttrType::Tensors);
  ts.tensors = {make<int64_t>(DType::Int64, {2}, {7, -8}), Tensor(), make<uint8_t>(DType::UInt8, {0}, {})};
  odd.attrs["tensors"] = ts;
  odd.attrs["undef"] = attr("undef", ir::AttrType::Undefined);
  odd.attrs["renamed"] = attr("original_name", ir::AttrType::Int);
  g.nodes.push_back(odd);

  g.initializers["init"] = make<int32_t>(DType::Int32, {2}, {1, 2});

  Source s0;
  s0.key = "fc.weight@1:1";
  s0.names = {"fc.weight", "val_85"};
  s0.consumer = "fc";
  s0.op_type = "MatMul";
  s0.node_position = 1;
  s0.slot = 1;
  s0.dtype = DType::Float32;
  s0.shape = {3, 4};
  s0.hash = 0xfedcba9876543210ull;
  s0.refittable = true;
  Source s1 = s0;
  s1.key = "fc.bias@2:0";
  s1.names = {"fc.bias"};
  s1.dtype = DType::Float16;
  s1.shape = {3};
  s1.hash = 1;
  s1.refittable = false;
  p.sources = {s0, s1};

  p.literals = {make<float>(DType::Float32, {}, {2.0f}), make<int64_t>(DType::Int64, {2}, {1, 0})};

  WeightEntry w0;  // derived by a two-step recipe
  w0.name = "w0";
  w0.kind = WeightKind::Derived;
  w0.dtype = DType::Float32;
  w0.shape = {4, 3};
  RecipeStep t;
  t.op_type = "Transpose";
  t.opset = 17;
  ir::Attribute perm = attr("perm", ir::AttrType::Ints);
  perm.ints = {1, 0};
  t.attrs["perm"] = perm;
  t.inputs = {{Operand::Kind::Source, 0}};
  RecipeStep mul;
  mul.domain = "reforge";
  mul.op_type = "Mul";
  mul.opset = 1;
  ir::Attribute scale = attr("scale", ir::AttrType::Float);
  scale.f = -0.0f;
  mul.attrs["scale"] = scale;
  mul.inputs = {{Operand::Kind::Step, 0}, {Operand::Kind::Literal, 0}};
  mul.output = 0;
  w0.recipe.steps = {t, mul};
  w0.recipe.result = {Operand::Kind::Step, 1};
  w0.sources = {0};
  w0.data = make<float>(DType::Float32, {4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, kNaNPayload, -0.0f, 12});
  w0.hash = hash_of(w0.data);

  WeightEntry w1;  // stripped: identity recipe, no data
  w1.name = "w1";
  w1.kind = WeightKind::Derived;
  w1.dtype = DType::Float16;
  w1.shape = {3};
  w1.recipe.result = {Operand::Kind::Source, 1};
  w1.sources = {1};
  w1.hash = 0x0123456789abcdefull;

  WeightEntry w2;
  w2.name = "w2";
  w2.kind = WeightKind::Baked;
  w2.dtype = DType::BFloat16;
  w2.shape = {2, 2};
  w2.recipe.result = {Operand::Kind::Source, 1};
  w2.sources = {1};
  w2.data = make<uint16_t>(DType::BFloat16, {2, 2}, {0x3f80, 0xffc1, 0x8000, 0x7f80});
  w2.hash = hash_of(w2.data);

  WeightEntry w3;  // literal: empty recipe
  w3.name = "shape_lit";
  w3.kind = WeightKind::Literal;
  w3.dtype = DType::Int64;
  w3.shape = {2};
  w3.data = make<int64_t>(DType::Int64, {2}, {2, 3});
  w3.hash = hash_of(w3.data);

  WeightEntry w4 = w3;
  w4.name = "flags";
  w4.dtype = DType::Bool;
  w4.shape = {3};
  w4.data = make<uint8_t>(DType::Bool, {3}, {1, 0, 1});
  w4.hash = hash_of(w4.data);

  WeightEntry w5 = w3;
  w5.name = "empty";
  w5.dtype = DType::UInt8;
  w5.shape = {0, 5};
  w5.data = make<uint8_t>(DType::UInt8, {0, 5}, {});
  w5.hash = hash_of(w5.data);

  WeightEntry w6 = w3;
  w6.name = "eps";
  w6.dtype = DType::Float64;
  w6.shape = {};
  w6.data = make<double>(DType::Float64, {}, {1e-300});
  w6.hash = hash_of(w6.data);

  p.weights = {w0, w1, w2, w3, w4, w5, w6};
  p.fingerprint = {"0 ConstantOfShape value=t:float32[1]", "1 MatMul in0=input:x in1=source", "2 Custom"};
  // Inferred value types: symbols of the inputs and made by inference, unknown rank and type.
  p.values = {{"x", DType::Float32, true, {{-1, "batch"}, {4, ""}, {-1, "unk_0"}, {3, ""}}},
              {"mask", DType::Bool, false, {}},
              {"filled", DType::Float32, true, {{2, ""}, {3, ""}}},
              {"h", DType::Float32, true, {{-1, "batch"}, {4, ""}, {-1, "unk_0"}, {3, ""}}},
              {"y", DType::Undefined, false, {}}};
  return p;
}

inline void expect_tensor_eq(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (!a.defined()) return;
  EXPECT_EQ(a.dtype(), b.dtype()) << what;
  EXPECT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  if (a.nbytes()) {
    EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes())) << what << " bytes differ";
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.raw()) % 64, 0u) << what << " is not 64-byte aligned";
}

inline void expect_attrs_eq(const std::map<std::string, ir::Attribute>& a,
                            const std::map<std::string, ir::Attribute>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [key, x] : a) {
    ASSERT_TRUE(b.count(key)) << what << " lost attribute " << key;
    const ir::Attribute& y = b.at(key);
    std::string w = what + " attribute " + key;
    EXPECT_EQ(x.name, y.name) << w;
    EXPECT_EQ(x.type, y.type) << w;
    EXPECT_EQ(float_to_bits(x.f), float_to_bits(y.f)) << w;
    EXPECT_EQ(x.i, y.i) << w;
    EXPECT_EQ(x.s, y.s) << w;
    expect_tensor_eq(x.t, y.t, w);
    ASSERT_EQ(x.floats.size(), y.floats.size()) << w;
    for (size_t i = 0; i < x.floats.size(); ++i) EXPECT_EQ(float_to_bits(x.floats[i]), float_to_bits(y.floats[i])) << w;
    EXPECT_EQ(x.ints, y.ints) << w;
    EXPECT_EQ(x.strings, y.strings) << w;
    ASSERT_EQ(x.tensors.size(), y.tensors.size()) << w;
    for (size_t i = 0; i < x.tensors.size(); ++i) expect_tensor_eq(x.tensors[i], y.tensors[i], w);
    EXPECT_EQ(y.g, nullptr) << w;
  }
}

inline void expect_value_infos_eq(const std::vector<ir::ValueInfo>& a, const std::vector<ir::ValueInfo>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].dtype, b[i].dtype);
    EXPECT_EQ(a[i].has_shape, b[i].has_shape);
    ASSERT_EQ(a[i].shape.size(), b[i].shape.size());
    for (size_t k = 0; k < a[i].shape.size(); ++k) {
      EXPECT_EQ(a[i].shape[k].value, b[i].shape[k].value);
      EXPECT_EQ(a[i].shape[k].symbol, b[i].shape[k].symbol);
    }
  }
}

inline bool operand_eq(const Operand& a, const Operand& b) { return a.kind == b.kind && a.index == b.index; }

// Compares every field; weight data only when `weights_loaded`, else it must be undefined.
inline void expect_plan_eq(const Plan& a, const Plan& b, bool weights_loaded = true) {
  EXPECT_EQ(b.format_version, written_format_version(a));
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.precision, b.precision);
  EXPECT_EQ(a.individual_patterns, b.individual_patterns);
  EXPECT_EQ(a.stripped, b.stripped);
  EXPECT_EQ(a.producer, b.producer);
  EXPECT_TRUE(a.build == b.build) << "build record";
  EXPECT_EQ(a.model_name, b.model_name);
  EXPECT_EQ(a.fingerprint, b.fingerprint);

  const ir::Graph &ga = a.graph, &gb = b.graph;
  EXPECT_EQ(ga.name, gb.name);
  EXPECT_EQ(ga.ir_version, gb.ir_version);
  EXPECT_EQ(ga.opsets, gb.opsets);
  EXPECT_EQ(ga.metadata, gb.metadata);
  expect_value_infos_eq(a.values, b.values);
  expect_value_infos_eq(ga.inputs, gb.inputs);
  expect_value_infos_eq(ga.outputs, gb.outputs);
  ASSERT_EQ(ga.nodes.size(), gb.nodes.size());
  for (size_t i = 0; i < ga.nodes.size(); ++i) {
    const ir::Node &x = ga.nodes[i], &y = gb.nodes[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.op_type, y.op_type);
    EXPECT_EQ(x.domain, y.domain);
    EXPECT_EQ(x.opset, y.opset);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.outputs, y.outputs);
    EXPECT_EQ(x.metadata, y.metadata);
    expect_attrs_eq(x.attrs, y.attrs, x.label());
  }
  ASSERT_EQ(ga.initializers.size(), gb.initializers.size());
  for (const auto& [name, t] : ga.initializers) expect_tensor_eq(t, gb.initializers.at(name), name);

  ASSERT_EQ(a.literals.size(), b.literals.size());
  for (size_t i = 0; i < a.literals.size(); ++i) expect_tensor_eq(a.literals[i], b.literals[i], "literal");

  ASSERT_EQ(a.sources.size(), b.sources.size());
  for (size_t i = 0; i < a.sources.size(); ++i) {
    const Source &x = a.sources[i], &y = b.sources[i];
    EXPECT_EQ(x.key, y.key);
    EXPECT_EQ(x.names, y.names);
    EXPECT_EQ(x.consumer, y.consumer);
    EXPECT_EQ(x.op_type, y.op_type);
    EXPECT_EQ(x.node_position, y.node_position);
    EXPECT_EQ(x.slot, y.slot);
    EXPECT_EQ(x.dtype, y.dtype);
    EXPECT_EQ(x.shape, y.shape);
    EXPECT_EQ(x.hash, y.hash);
    EXPECT_EQ(x.refittable, y.refittable);
  }

  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i) {
    const WeightEntry &x = a.weights[i], &y = b.weights[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.dtype, y.dtype);
    EXPECT_EQ(x.shape, y.shape);
    EXPECT_EQ(x.sources, y.sources);
    EXPECT_EQ(x.hash, y.hash);
    EXPECT_TRUE(operand_eq(x.recipe.result, y.recipe.result)) << x.name;
    ASSERT_EQ(x.recipe.steps.size(), y.recipe.steps.size());
    for (size_t k = 0; k < x.recipe.steps.size(); ++k) {
      const RecipeStep &s = x.recipe.steps[k], &t = y.recipe.steps[k];
      EXPECT_EQ(s.domain, t.domain);
      EXPECT_EQ(s.op_type, t.op_type);
      EXPECT_EQ(s.opset, t.opset);
      EXPECT_EQ(s.output, t.output);
      EXPECT_EQ(s.num_outputs, t.num_outputs);
      ASSERT_EQ(s.inputs.size(), t.inputs.size());
      for (size_t m = 0; m < s.inputs.size(); ++m) EXPECT_TRUE(operand_eq(s.inputs[m], t.inputs[m]));
      expect_attrs_eq(s.attrs, t.attrs, x.name + " step");
    }
    if (weights_loaded)
      expect_tensor_eq(x.data, y.data, x.name);
    else
      EXPECT_FALSE(y.data.defined()) << x.name;
  }
}

// Parses bytes from a 64-byte aligned heap buffer of exactly their size (so ASan sees overreads).
inline Plan parse_bytes(const std::string& bytes, const ReadOptions& options = {}) {
  void* p = nullptr;
  if (::posix_memalign(&p, 64, std::max<size_t>(bytes.size(), 1)) != 0) throw std::bad_alloc();
  std::shared_ptr<const void> owner(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
  return parse_plan(owner, p, bytes.size(), options, "plan 'test.plan'");
}

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline uint64_t u64_at(const std::string& b, size_t off) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(b[off + i])) << (8 * i);
  return v;
}
inline void put_u64(std::string& b, size_t off, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[off + i] = static_cast<char>(v >> (8 * i));
}
inline void put_u32(std::string& b, size_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[off + i] = static_cast<char>(v >> (8 * i));
}

inline json metadata_of(const std::string& file) { return json::parse(file.substr(64, u64_at(file, 24))); }

// Rebuilds a file from `file` with new metadata and correct checksums: a hostile but
// well-formed file, to exercise the validation behind the checksums.
inline std::string with_metadata(const std::string& file, const std::string& meta) {
  std::string data = file.substr(u64_at(file, 32));
  std::string out = file.substr(0, 64) + meta;
  out.resize((out.size() + 63) / 64 * 64, '\0');
  put_u64(out, 24, meta.size());
  put_u64(out, 32, out.size());
  put_u64(out, 48, XXH3_64bits(meta.data(), meta.size()));
  put_u64(out, 56, XXH3_64bits(out.data(), 56));
  return out + data;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "reforge_plan_test_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  fs::path path_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace plan_test
