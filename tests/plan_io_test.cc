// Plan file format: every field round-trips bit-exactly, metadata-only reads, the writer's
// refusals, and atomic writes. Hostile inputs are in plan_io_corrupt_test.cc.
#include "plan_test_util.h"

using namespace plan_test;

TEST(PlanIO, RoundTripEveryField) {
  TempDir dir;
  Plan p = sample_plan();
  std::string path = dir.file("tiny.plan");
  write_plan(p, path);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"tiny.plan"});
  Plan q = read_plan(path, {.load_weights = true, .verify_weight_hashes = true});
  expect_plan_eq(p, q);
  // serialize_plan gives the same bytes, and is deterministic.
  std::string bytes = serialize_plan(p);
  EXPECT_EQ(bytes, slurp(path));
  EXPECT_EQ(bytes, serialize_plan(q));
  expect_plan_eq(p, parse_bytes(bytes));
}

TEST(PlanIO, WeightsWrapTheBufferWithoutCopy) {
  std::string bytes = serialize_plan(sample_plan());
  void* buf = nullptr;
  ASSERT_EQ(::posix_memalign(&buf, 64, bytes.size()), 0);
  std::memcpy(buf, bytes.data(), bytes.size());
  std::weak_ptr<const void> watch;
  {
    std::shared_ptr<const void> owner(buf, [](const void* q) { std::free(const_cast<void*>(q)); });
    watch = owner;
    Plan q = parse_plan(owner, buf, bytes.size());
    owner.reset();
    const auto* lo = static_cast<const char*>(buf);
    const Tensor& w0 = q.weights[0].data;
    EXPECT_GE(static_cast<const char*>(w0.raw()), lo);
    EXPECT_LE(static_cast<const char*>(w0.raw()) + w0.nbytes(), lo + bytes.size());
    EXPECT_FALSE(watch.expired()) << "tensors must keep the buffer alive";
  }
  EXPECT_TRUE(watch.expired());
  // An unaligned buffer is copied once, so tensors stay aligned.
  std::string shifted = " " + bytes;
  Plan q = parse_plan(nullptr, shifted.data() + 1, bytes.size());
  expect_plan_eq(sample_plan(), q);
}

TEST(PlanIO, MetadataOnlyReadLeavesWeightDataUndefined) {
  TempDir dir;
  Plan p = sample_plan();
  write_plan(p, dir.file("a.plan"));
  Plan q = read_plan(dir.file("a.plan"), {.load_weights = false});
  expect_plan_eq(p, q, /*weights_loaded=*/false);
  // Structure that is not weight data is complete: attribute tensors and literals are loaded.
  EXPECT_TRUE(q.graph.nodes[0].attrs.at("value").t.defined());
  EXPECT_TRUE(q.literals[1].defined());
}

TEST(PlanIO, EmptyPlanRoundTrips) {
  Plan p;
  std::string bytes = serialize_plan(p);
  EXPECT_EQ(bytes.size() % 64, 0u);  // no data: the file ends at the aligned data section
  expect_plan_eq(p, parse_bytes(bytes));
}

TEST(PlanIO, HeaderLayout) {
  std::string b = serialize_plan(sample_plan());
  EXPECT_EQ(b.substr(0, 8), std::string("\x89RFPLAN\n", 8));
  EXPECT_EQ(static_cast<unsigned char>(b[8]), 1u);  // no subgraphs: version 1
  EXPECT_EQ(u64_at(b, 16), 64u);
  EXPECT_EQ(u64_at(b, 32) % 64, 0u);
  EXPECT_EQ(u64_at(b, 32) + u64_at(b, 40), b.size());
  json m = metadata_of(b);
  EXPECT_EQ(m["weights"][1]["data"], nullptr);  // the stripped weight
  EXPECT_EQ(m["weights"][0]["data"]["offset"].get<uint64_t>() % 64, 0u);
}

TEST(PlanIO, WriterRefusesWhatItCannotStore) {
  TempDir dir;
  Plan p = sample_plan();
  p.graph.nodes[2].attrs["bodies"] = attr("bodies", ir::AttrType::Graphs);
  EXPECT_NE(error_of([&] {
              write_plan(p, dir.file("x.plan"));
            }).find("attributes holding lists of graphs are not supported in plans"),
            std::string::npos);
  EXPECT_TRUE(dir.entries().empty());

  Plan q = sample_plan();
  q.weights[0].shape = {3, 4};  // data is [4,3]
  EXPECT_NE(error_of([&] { serialize_plan(q); }).find("weight 'w0': data is float32[4,3]"), std::string::npos);
}

TEST(PlanIO, AtomicWrite) {
  TempDir dir;
  // A folder that does not exist: an error, and no temporary file anywhere.
  std::string e = error_of([&] { write_plan(sample_plan(), dir.file("missing/x.plan")); });
  EXPECT_NE(e.find("missing/x.plan"), std::string::npos) << e;
  EXPECT_TRUE(dir.entries().empty());

  // Overwriting replaces the file whole: a big plan, then a small one.
  Plan big = sample_plan();
  big.weights[0].data = Tensor::empty(DType::Float32, {4, 3});
  WeightEntry huge = big.weights[6];
  huge.name = "huge";
  huge.dtype = DType::Float32;
  huge.shape = {1 << 16};
  huge.data = Tensor::empty(DType::Float32, {1 << 16});
  huge.hash = hash_of(huge.data);
  big.weights.push_back(huge);
  std::string path = dir.file("p.plan");
  write_plan(big, path);
  Plan small;
  small.model_name = "small";
  write_plan(small, path);
  EXPECT_EQ(slurp(path), serialize_plan(small));
  EXPECT_EQ(read_plan(path).model_name, "small");
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"p.plan"});

  // A failure while encoding leaves the existing plan untouched.
  Plan bad = sample_plan();
  bad.weights[0].dtype = DType::Int8;
  EXPECT_THROW(write_plan(bad, path), Error);
  EXPECT_EQ(slurp(path), serialize_plan(small));
  // The destination is a folder: rename fails, the temporary file is removed.
  fs::create_directory(dir.file("d.plan"));
  EXPECT_THROW(write_plan(small, dir.file("d.plan")), Error);
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"d.plan", "p.plan"}));
}
