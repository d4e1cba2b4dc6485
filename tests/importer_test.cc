// Importer tests on hand-built ModelProtos: value forms, external data, and hostile input.
#include "onnx/importer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/npy.h"
#include "onnx/proto/onnx.pb.h"
#include "runtime/engine.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

::onnx::ModelProto identity_model() {
  ::onnx::ModelProto m;
  m.set_ir_version(10);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(18);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(::onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  tt->mutable_shape()->add_dim()->set_dim_value(3);
  auto* out = g->add_output();
  out->set_name("x");
  return m;
}

ir::Graph import(const ::onnx::ModelProto& m, const std::string& base_dir = "") {
  std::string bytes;
  m.SerializeToString(&bytes);
  reforge::onnx::ImportOptions o;
  o.base_dir = base_dir;
  return reforge::onnx::import_model_bytes(bytes.data(), bytes.size(), o);
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("reforge_importer_test_" + name + "_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(Importer, ReadsTypedFieldsAndRawData) {
  auto m = identity_model();
  auto* g = m.mutable_graph();
  auto* a = g->add_initializer();
  a->set_name("typed");
  a->set_data_type(::onnx::TensorProto::INT64);
  a->add_dims(2);
  a->add_int64_data(-5);
  a->add_int64_data(7);
  auto* b = g->add_initializer();
  b->set_name("raw");
  b->set_data_type(::onnx::TensorProto::FLOAT);
  b->add_dims(2);
  float vals[2] = {1.5f, -2.0f};
  b->set_raw_data(std::string(reinterpret_cast<const char*>(vals), sizeof vals));
  auto* h = g->add_initializer();
  h->set_name("half");
  h->set_data_type(::onnx::TensorProto::FLOAT16);
  h->add_dims(1);
  h->add_int32_data(0x3c00);  // 1.0
  ir::Graph gr = import(m);
  EXPECT_EQ(gr.initializers.at("typed").to_int64_vector(), (std::vector<int64_t>{-5, 7}));
  EXPECT_EQ(gr.initializers.at("raw").as_double(1), -2.0);
  EXPECT_EQ(gr.initializers.at("half").as_double(0), 1.0);
  ASSERT_EQ(gr.inputs.size(), 1u);
  EXPECT_EQ(gr.inputs[0].shape[0].symbol, "batch");
  EXPECT_EQ(gr.inputs[0].shape[1].value, 3);
}

TEST(Importer, KeepsNodeMetadata) {
  auto m = identity_model();
  auto* g = m.mutable_graph();
  g->mutable_output(0)->set_name("y");
  auto* n = g->add_node();
  n->set_op_type("Identity");
  n->set_name("id0");
  n->add_input("x");
  n->add_output("y");
  auto* md = n->add_metadata_props();
  md->set_key("pkg.torch.onnx.name_scopes");
  md->set_value("['', 'layers.0']");
  ir::Graph gr = import(m);
  ASSERT_EQ(gr.nodes.size(), 1u);
  ASSERT_EQ(gr.nodes[0].metadata.size(), 1u);
  EXPECT_EQ(gr.nodes[0].metadata[0].first, "pkg.torch.onnx.name_scopes");
  EXPECT_EQ(gr.nodes[0].opset, 18);
}

TEST(Importer, RejectsRawDataOfWrongSize) {
  auto m = identity_model();
  auto* b = m.mutable_graph()->add_initializer();
  b->set_name("w");
  b->set_data_type(::onnx::TensorProto::FLOAT);
  b->add_dims(4);
  b->set_raw_data(std::string(12, '\0'));
  try {
    import(m);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w'"), std::string::npos) << e.what();
  }
}

TEST(Importer, RejectsHugeAndNegativeDims) {
  auto m = identity_model();
  auto* b = m.mutable_graph()->add_initializer();
  b->set_name("huge");
  b->set_data_type(::onnx::TensorProto::FLOAT);
  b->add_dims(int64_t{1} << 40);
  b->add_dims(int64_t{1} << 40);
  EXPECT_THROW(import(m), Error);
  b->clear_dims();
  b->add_dims(-3);
  EXPECT_THROW(import(m), Error);
}

TEST(Importer, ExternalDataInsideFolderIsMappedAndEscapesAreRefused) {
  fs::path dir = temp_dir("ext");
  std::vector<float> w = {1, 2, 3, 4, 5, 6};
  {
    std::ofstream f(dir / "weights.bin", std::ios::binary);
    f.write("padding!", 8);
    f.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * 4));
  }
  auto m = identity_model();
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(::onnx::TensorProto::FLOAT);
  t->add_dims(2);
  t->add_dims(3);
  t->set_data_location(::onnx::TensorProto::EXTERNAL);
  auto add_kv = [&](const char* k, const std::string& v) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add_kv("location", "weights.bin");
  add_kv("offset", "8");
  add_kv("length", "24");
  ir::Graph gr = import(m, dir.string());
  EXPECT_EQ(gr.initializers.at("w").as_double(5), 6.0);

  t->mutable_external_data(1)->set_value("16");  // offset: 16 + 24 > 32 bytes in the file
  EXPECT_THROW(import(m, dir.string()), Error);
  t->mutable_external_data(1)->set_value("8");
  t->mutable_external_data(0)->set_value("../weights.bin");
  try {
    import(m, dir.string());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("escapes"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Importer, CycleIsAnError) {
  auto m = identity_model();
  auto* g = m.mutable_graph();
  g->mutable_output(0)->set_name("b");
  auto* n1 = g->add_node();
  n1->set_op_type("Add");
  n1->add_input("x");
  n1->add_input("b");
  n1->add_output("a");
  auto* n2 = g->add_node();
  n2->set_op_type("Add");
  n2->add_input("x");
  n2->add_input("a");
  n2->add_output("b");
  ir::Graph gr = import(m);
  try {
    gr.topological_order();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos) << e.what();
  }
}

TEST(Importer, GarbageIsAnErrorNotACrash) {
  std::string junk = "this is not a protobuf \x01\x02\xff\xff\xff\xff\xff";
  EXPECT_THROW(reforge::onnx::import_model_bytes(junk.data(), junk.size()), Error);
}

TEST(Npy, RoundTripAndTruncation) {
  fs::path dir = temp_dir("npy");
  Tensor t = Tensor::empty(DType::Int32, {2, 3});
  for (int i = 0; i < 6; ++i) t.mutable_data<int32_t>()[i] = i * 7 - 3;
  std::string p = (dir / "a.npy").string();
  write_npy(p, t);
  Tensor r = read_npy(p);
  EXPECT_EQ(r.shape(), t.shape());
  EXPECT_EQ(r.to_int64_vector(), t.to_int64_vector());
  std::string bytes;
  {
    std::ifstream f(p, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  for (size_t cut = 0; cut < bytes.size(); cut += 7) EXPECT_THROW(parse_npy(bytes.data(), cut), Error) << cut;
  fs::remove_all(dir);
}
