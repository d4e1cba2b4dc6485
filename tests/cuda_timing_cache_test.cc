// The CUDA backend's timing cache (backends/capabilities.h: TimingCache,
// backends/cuda/cudnn_common.h): the convolution algorithms chosen per geometry, saved as text and
// loaded by another process so that both run the same algorithms. Malformed caches are refused
// naming the file and the line, before anything is loaded (no GPU needed for those); the round
// trip and the device check run on a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "support/cuda_compare.h"
#include "support/engine_checks.h"

using namespace reforge;

namespace {

using test_support::error_of;

const backends::Backend& cuda() {
  const backends::Backend* b = backends::find_backend("cuda");
  EXPECT_TRUE(b);
  return *b;
}

std::string load_error(const std::string& text) {
  return error_of([&] { cuda().timing_cache->load(text, "timing cache 'f.cache'"); });
}

const char* kHead = "reforge timing cache 1\ndevice Some GPU\ncudnn 91300\n";

TEST(CudaTimingCache, MalformedCachesAreRefusedNamingTheLine) {
  REQUIRE_CUDA_BUILD();
  ASSERT_NE(cuda().timing_cache, nullptr);
  struct Case {
    std::string text, message;
  };
  for (const Case& c : std::vector<Case>{
           {"", "timing cache 'f.cache': not a reforge timing cache (it ends before its device and cuDNN lines)"},
           {"trt timing cache\n", "timing cache 'f.cache': line 1: not a reforge timing cache"},
           {"reforge timing cache 1\ncudnn 91300\n", "line 2: expected 'device ...'"},
           {std::string(kHead) + "0 0 1 4 1 3 8 8 -> \n", "line 4: the algorithm is not one integer"},
           {std::string(kHead) + "0 0 1 4 1 3 8 8 -> 1 2\n", "line 4: the algorithm is not one integer"},
           {std::string(kHead) + "0 0 1 4 1 3 8 8 1\n", "line 4: expected '<geometry> -> <algorithm>'"},
           {std::string(kHead) + "0 0 x 4 -> 1\n", "line 4: the geometry is not a list of integers"},
           {std::string(kHead) + "0 0 99999999999 -> 1\n", "line 4: a number beyond 32 bits"},
           {std::string(kHead) + "\n0 0 1 4 -> 1\n2 0 1 4 -> 1\n",
            "line 6: kind 2 is not a convolution (0) or a transposed one (1)"},
           {std::string(kHead) + "0 0 1 4 -> 99\n", "line 4: algorithm 99 is outside cuDNN's range [0, "},
           {std::string(kHead) + "1 0 1 4 -> -1\n", "line 4: algorithm -1 is outside cuDNN's range [0, "},
       }) {
    const std::string err = load_error(c.text);
    EXPECT_NE(err.find(c.message), std::string::npos) << "cache:\n" << c.text << "error: " << err;
    EXPECT_NE(err.find("timing cache 'f.cache'"), std::string::npos) << err;
  }
}

// A graph of two convolutions of different geometries.
ir::Graph conv_graph() {
  ir::Graph g;
  g.name = "convs";
  g.ir_version = 10;
  g.opsets[""] = 17;
  g.inputs = {test_support::value_info("X", DType::Float32, {1, 3, 16, 16})};
  g.initializers["W1"] = test_support::random_of(DType::Float32, {8, 3, 3, 3}, 1);
  g.initializers["W2"] = test_support::random_of(DType::Float32, {4, 8, 1, 1}, 2);
  g.nodes = {test_support::node("H", "Conv", {"X", "W1"}, {{"pads", ir::ints_attr("pads", {1, 1, 1, 1})}}),
             test_support::node("Y", "Conv", {"H", "W2"})};
  ir::ValueInfo y;
  y.name = "Y";
  g.outputs = {y};
  return g;
}

TEST(CudaTimingCache, SavedChoicesLoadBackAndRunTheSame) {
  REQUIRE_GPU();
  const ir::Graph g = conv_graph();
  const std::map<std::string, Tensor> feed = {{"X", test_support::random_of(DType::Float32, {1, 3, 16, 16}, 3)}};
  const Tensor first = test_support::engine_for(g, {}, "cuda").run(feed)[0];
  const std::string saved = cuda().timing_cache->save();
  std::istringstream in(saved);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_GE(lines.size(), 5u) << saved;  // header, device, cuDNN, both geometries
  EXPECT_EQ(lines[0], "reforge timing cache 1");
  EXPECT_EQ(lines[1].rfind("device ", 0), 0u) << saved;
  EXPECT_EQ(lines[2].rfind("cudnn ", 0), 0u) << saved;
  for (size_t i = 3; i < lines.size(); ++i) EXPECT_NE(lines[i].find(" -> "), std::string::npos) << lines[i];
  // Loaded back, the same choices: the next save is the same text and the run gives the same bits.
  ASSERT_EQ(load_error(saved), "");
  EXPECT_EQ(cuda().timing_cache->save(), saved);
  const Tensor again = test_support::engine_for(g, {}, "cuda").run(feed)[0];
  ASSERT_EQ(again.nbytes(), first.nbytes());
  EXPECT_EQ(std::memcmp(again.raw(), first.raw(), first.nbytes()), 0);
  // Another device's cache, or another cuDNN's, is refused; nothing of it is loaded.
  std::string other = saved;
  other.replace(other.find("device ") + 7, lines[1].size() - 7, "Some Other GPU");
  EXPECT_NE(load_error(other).find("the timing cache was made on Some Other GPU; this device is "), std::string::npos)
      << load_error(other);
  std::string older = saved;
  older.replace(older.find("cudnn ") + 6, lines[2].size() - 6, "1");
  EXPECT_NE(load_error(older).find("the timing cache was made with cuDNN 1; this process has cuDNN "),
            std::string::npos);
  EXPECT_EQ(cuda().timing_cache->save(), saved);
}

}  // namespace
