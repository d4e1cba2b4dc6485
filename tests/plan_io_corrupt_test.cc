// Plan file format on damaged and hostile input: truncations at every offset, bit flips in the
// header and metadata, future format versions, corrupted weight bytes, and metadata with valid
// checksums but malicious content. Each must be an Error naming the file, never a crash: run
// this under the ASan build too.
#include <random>

#include "plan_test_util.h"

using namespace plan_test;

TEST(PlanIO, WeightHashVerification) {
  Plan p = sample_plan();
  std::string b = serialize_plan(p);
  json m = metadata_of(b);
  // Corrupt one byte of w0's data: the data section has no global checksum, so only a verifying
  // read (the default) notices; opting out loads the damaged bytes.
  size_t off = u64_at(b, 32) + m["weights"][0]["data"]["offset"].get<uint64_t>();
  b[off] ^= 0x01;
  EXPECT_NO_THROW(parse_bytes(b, {.verify_weight_hashes = false}));
  std::string e0 = error_of([&] { parse_bytes(b); });
  EXPECT_NE(e0.find("engine weight 'w0' (derived float32[4,3] from 'fc.weight'; weights[0]"), std::string::npos) << e0;
  EXPECT_NE(e0.find("data hash mismatch"), std::string::npos) << e0;
  // Attribute tensors and literals are always verified.
  std::string c = serialize_plan(p);
  size_t lit = u64_at(c, 32) + m["literals"][1]["offset"].get<uint64_t>();
  c[lit] ^= 0x40;
  std::string e = error_of([&] { parse_bytes(c, {.load_weights = false}); });
  EXPECT_NE(e.find("literals[1]: data hash mismatch: the file is corrupted"), std::string::npos) << e;
  // A weight whose recorded hash disagrees with its data.
  p.weights[2].hash ^= 1;
  e = error_of([&] { parse_bytes(serialize_plan(p), {.verify_weight_hashes = true}); });
  EXPECT_NE(e.find("differs from the weight's recorded hash"), std::string::npos) << e;
}

// Plan::values must name values of the graph, each once; plans without the key have none.
TEST(PlanIO, ValueTypesNameGraphValuesOnce) {
  const std::string b = serialize_plan(sample_plan());
  json m = metadata_of(b);
  ASSERT_TRUE(m.contains("values"));
  json unknown = m;
  unknown["values"][2]["name"] = "nowhere";
  std::string e = error_of([&] { parse_bytes(with_metadata(b, unknown.dump())); });
  EXPECT_NE(e.find("values[2]: 'nowhere' is not a graph input or node output"), std::string::npos) << e;
  json twice = m;
  twice["values"][1]["name"] = "x";
  e = error_of([&] { parse_bytes(with_metadata(b, twice.dump())); });
  EXPECT_NE(e.find("values[1]: 'x' is listed twice"), std::string::npos) << e;
  json older = m;
  older.erase("values");
  EXPECT_TRUE(parse_bytes(with_metadata(b, older.dump())).values.empty());
}

TEST(PlanIO, TruncationAtEveryOffsetIsAnError) {
  std::string b = serialize_plan(sample_plan());
  for (size_t n = 0; n < b.size(); ++n) {
    std::string e = error_of([&] { parse_bytes(b.substr(0, n)); });
    ASSERT_NE(e, "(no error)") << "truncated at " << n;
    ASSERT_NE(e.find("plan 'test.plan'"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { parse_bytes(b + "x"); }).find("unexpected bytes"), std::string::npos);
}

TEST(PlanIO, BitFlipsInHeaderAndMetadataAreDetected) {
  std::string b = serialize_plan(sample_plan());
  size_t meta_end = 64 + u64_at(b, 24);
  for (size_t i = 0; i < meta_end; ++i) {
    for (int bit : {0, 5, 7}) {
      std::string c = b;
      c[i] ^= static_cast<char>(1 << bit);
      std::string e = error_of([&] { parse_bytes(c); });
      ASSERT_NE(e, "(no error)") << "flip at byte " << i;
      if (i >= 64) {
        ASSERT_NE(e.find("metadata checksum mismatch: the file is corrupted"), std::string::npos) << e;
      } else if (i >= 12) {
        ASSERT_NE(e.find("header checksum mismatch: the file is corrupted"), std::string::npos) << e;
      }
    }
  }
}

TEST(PlanIO, FutureFormatVersionIsRefused) {
  TempDir dir;
  std::string b = serialize_plan(sample_plan());
  put_u32(b, 8, 7);
  put_u64(b, 56, XXH3_64bits(b.data(), 56));
  std::ofstream(dir.file("x.plan"), std::ios::binary) << b;
  std::string e = error_of([&] { read_plan(dir.file("x.plan")); });
  EXPECT_NE(e.find("plan '" + dir.file("x.plan") + "' has format version 7; this reforge reads up to 2"),
            std::string::npos)
      << e;
}

TEST(PlanIO, MissingOrEmptyFile) {
  TempDir dir;
  EXPECT_NE(error_of([&] { read_plan(dir.file("nope.plan")); }).find("nope.plan"), std::string::npos);
  std::ofstream(dir.file("empty.plan")).close();
  EXPECT_NE(error_of([&] { read_plan(dir.file("empty.plan")); }).find("is empty"), std::string::npos);
  std::ofstream(dir.file("text.plan")) << "this is not a plan, but it is long enough to have a header......";
  EXPECT_NE(error_of([&] { read_plan(dir.file("text.plan")); }).find("not a reforge plan"), std::string::npos);
}

// Metadata with valid checksums but hostile content: every case is an Error naming the problem.
TEST(PlanIO, MaliciousMetadataIsRejected) {
  std::string b = serialize_plan(sample_plan());
  const json base = metadata_of(b);
  uint64_t data_size = u64_at(b, 40);
  struct Case {
    const char* name;
    std::function<void(json&)> edit;
    std::string expect;
  };
  std::vector<Case> cases = {
      {"offset past end", [&](json& m) { m["weights"][0]["data"]["offset"] = (data_size + 63) / 64 * 64; },
       "past the end of the data section"},
      {"huge offset", [](json& m) { m["weights"][0]["data"]["offset"] = 0xffffffffffffffc0ull; }, "past the end"},
      {"huge nbytes", [](json& m) { m["literals"][0]["nbytes"] = 0xfffffffffffffff0ull; }, "bytes stored"},
      {"nbytes vs shape", [](json& m) { m["weights"][0]["data"]["nbytes"] = 44; }, "float32[4,3] needs 12 x 4 bytes"},
      {"misaligned", [](json& m) { m["literals"][0]["offset"] = 4; }, "not a multiple of 64"},
      {"shape overflow",
       [](json& m) {
         m["literals"][1]["shape"] = {1ll << 40, 1ll << 40};
       },
       "too many elements"},
      {"negative dim", [](json& m) { m["weights"][1]["shape"] = {-3}; }, "negative dimension"},
      {"unknown dtype", [](json& m) { m["literals"][0]["dtype"] = 99; }, "unknown element type code 99"},
      {"string tensor", [](json& m) { m["literals"][0]["dtype"] = 8; }, "cannot hold data"},
      {"source index",
       [](json& m) {
         m["weights"][0]["recipe"]["steps"][0]["inputs"][0] = {"source", 2};
       },
       "source 2 does not exist"},
      {"forward step",
       [](json& m) {
         m["weights"][0]["recipe"]["steps"][0]["inputs"][0] = {"step", 0};
       },
       "step 0 does not exist"},
      {"literal index",
       [](json& m) {
         m["weights"][0]["recipe"]["steps"][1]["inputs"][1] = {"literal", 5};
       },
       "literal 5 does not exist"},
      {"result",
       [](json& m) {
         m["weights"][0]["recipe"]["result"] = {"step", 2};
       },
       "step 2 does not exist"},
      {"weight sources", [](json& m) { m["weights"][0]["sources"] = {4000000000ll}; },
       "source 4000000000 does not exist"},
      {"u32 range", [](json& m) { m["sources"][0]["slot"] = 1ll << 40; }, "out of range"},
      {"i64 range", [](json& m) { m["graph"]["ir_version"] = 0xffffffffffffffffull; }, "integer out of range"},
      {"float for int", [](json& m) { m["graph"]["ir_version"] = 1.5; }, "expected an integer"},
      {"operand kind",
       [](json& m) {
         m["weights"][0]["recipe"]["result"] = {"bogus", 0};
       },
       "unknown operand kind"},
      {"wrong type", [](json& m) { m["graph"]["nodes"] = "nodes"; }, "graph.nodes: expected an array"},
      {"missing field", [](json& m) { m["graph"]["nodes"][1].erase("op_type"); }, "missing field 'op_type'"},
      {"bad hash", [](json& m) { m["weights"][0]["hash"] = "xyz"; }, "expected 16 hex digits"},
      {"bad hex string",
       [](json& m) {
         m["graph"]["name"] = {{"hex", "zz"}};
       },
       "invalid hex string"},
      {"graph attribute without a graph", [](json& m) { m["graph"]["nodes"][0]["attrs"][0]["type"] = "graph"; },
       "missing field 'g'"},
      {"graphs attribute", [](json& m) { m["graph"]["nodes"][0]["attrs"][0]["type"] = "graphs"; },
       "attributes holding lists of graphs are not supported in plans"},
      {"subgraph nested too deep",
       [](json& m) {
         json a = m["graph"]["nodes"][0]["attrs"][0];
         json g = m["graph"];
         g["nodes"] = json::array();
         json nested = a;
         for (int d = 0; d < 40; ++d) {
           json n = {{"name", "n"},
                     {"op_type", "If"},
                     {"domain", ""},
                     {"opset", 17},
                     {"inputs", json::array()},
                     {"outputs", json::array()},
                     {"attrs", json::array({nested})},
                     {"metadata", json::array()}};
           json sub = g;
           sub["nodes"] = json::array({n});
           nested = {{"name", "body"}, {"type", "graph"}, {"g", sub}};
         }
         m["graph"]["nodes"][0]["attrs"][0] = nested;
       },
       "subgraphs nested more than 32 deep"},
      {"attr type", [](json& m) { m["graph"]["nodes"][0]["attrs"][0]["type"] = "complex"; }, "unknown attribute type"},
      {"duplicate attr",
       [](json& m) {
         auto& a = m["graph"]["nodes"][2]["attrs"];
         a.push_back(a[0]);
       },
       "duplicate attribute"},
      {"mode", [](json& m) { m["mode"] = "turbo"; }, "unknown build mode 'turbo'"},
      {"kind", [](json& m) { m["weights"][0]["kind"] = "magic"; }, "unknown weight kind"},
      {"not an object",
       [](json& m) {
         m = json::array({1, 2});
       },
       "expected a JSON object"},
  };
  for (const auto& c : cases) {
    json m = base;
    c.edit(m);
    std::string e = error_of([&] { parse_bytes(with_metadata(b, m.dump())); });
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.name << ": " << e;
    EXPECT_NE(e.find("plan 'test.plan'"), std::string::npos) << c.name << ": " << e;
  }
  EXPECT_NO_THROW(parse_bytes(with_metadata(b, base.dump())));  // the helper itself is sound
  EXPECT_NE(error_of([&] { parse_bytes(with_metadata(b, "{\"producer\": ")); }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_bytes(with_metadata(b, std::string(100000, '['))); }).find("not valid JSON"),
            std::string::npos);
  // Deep nesting must not exhaust the stack (the JSON parser is iterative; we never recurse).
  std::string deep = "{\"producer\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_NE(error_of([&] { parse_bytes(with_metadata(b, deep)); }).find("producer: expected a string"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_bytes(with_metadata(b, "{\"a\": \"\xff\"}")); }).find("not valid JSON"),
            std::string::npos);
}

// Random structured damage behind valid checksums: replace a random field (or the container
// around it) with a value of a random type. Each parse must succeed or throw an Error; any
// other exception fails the test, and the ASan build catches bad reads.
TEST(PlanIO, RandomizedMetadataDamage) {
  std::string b = serialize_plan(sample_plan());
  const json base = metadata_of(b);
  std::vector<std::string> pointers;
  const json flat = base.flatten();
  for (const auto& item : flat.items()) {
    const std::string& ptr = item.key();
    pointers.push_back(ptr);
    std::string parent = ptr.substr(0, ptr.find_last_of('/'));
    if (!parent.empty()) pointers.push_back(parent);
  }
  const std::vector<json> values = {nullptr,
                                    true,
                                    -1,
                                    0,
                                    1,
                                    63,
                                    64,
                                    4096,
                                    -(1ll << 62),
                                    1ull << 63,
                                    0xffffffffffffffffull,
                                    2.5,
                                    "",
                                    "x",
                                    "step",
                                    json::array(),
                                    json::array({0, 1}),
                                    json::array({"source", 0}),
                                    json::object(),
                                    json{{"hex", "00"}}};
  std::mt19937_64 rng(12345);
  int errors = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    json m = base;
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits; ++k) {
      const std::string& ptr = pointers[rng() % pointers.size()];
      const json& value = values[rng() % values.size()];
      try {
        m[json::json_pointer(ptr)] = value;
      } catch (const json::exception&) {  // an earlier edit removed the path
      }
    }
    try {
      Plan q = parse_bytes(with_metadata(b, m.dump()), {.verify_weight_hashes = (iter % 2) == 0});
    } catch (const Error& e) {
      ++errors;
      ASSERT_NE(std::string(e.what()).find("plan 'test.plan'"), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(errors, 1000);
}
