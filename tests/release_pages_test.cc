// MappedFile::release_pages and Checkpoint::release_pages: the mapped bytes stay readable and
// unchanged, and the pages leave the process's resident set (RssFile in /proc/self/status), which
// is what bounds the peak memory of `build --checkpoint` and of a refit from a checkpoint
// (docs/reliability.md); CommitOptions::release, through which a refit releases its sources.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "builder/onnx_refit.h"
#include "core/file_pages.h"
#include "core/mapped_file.h"
#include "refit/refitter.h"
#include "refit/safetensors.h"
#include "support/llama_fixture.h"
#include "transforms/recipe.h"

using namespace reforge;
namespace fs = std::filesystem;

namespace {

// Resident file-backed memory of this process, in bytes.
size_t rss_file_bytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  size_t kib = 0;
  while (f >> key) {
    if (key == "RssFile:") {
      f >> kib;
      return kib * 1024;
    }
    f.ignore(1 << 20, '\n');
  }
  ADD_FAILURE() << "no RssFile in /proc/self/status";
  return 0;
}

// Sums every byte so that each page is read (and paged in).
uint64_t checksum(const unsigned char* p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; ++i) s = s * 31 + p[i];
  return s;
}

constexpr size_t kBytes = 32u << 20;

fs::path temp_file(const std::string& name) {
  return fs::temp_directory_path() / (name + "." + std::to_string(::getpid()));
}

}  // namespace

TEST(ReleasePages, MappedBytesStayAndLeaveTheResidentSet) {
  fs::path path = temp_file("reforge_release_pages");
  {
    std::ofstream out(path, std::ios::binary);
    std::string block(1 << 20, '\0');
    for (size_t b = 0; b < kBytes / block.size(); ++b) {
      for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>((b * 131 + i * 7) & 0xff);
      out.write(block.data(), static_cast<std::streamsize>(block.size()));
    }
  }
  {
    auto m = MappedFile::open(path.string());
    ASSERT_EQ(m->size(), kBytes);
    size_t before = rss_file_bytes();
    uint64_t first = checksum(m->data(), m->size());
    size_t touched = rss_file_bytes();
    EXPECT_GE(touched, before + kBytes * 9 / 10) << "reading the mapping should page it in";
    m->release_pages();
    size_t released = rss_file_bytes();
    EXPECT_LE(released + kBytes * 9 / 10, touched) << "release_pages left the mapping resident";
    // The same bytes, read again from the file; byte 12,345 of block 11, as written above.
    EXPECT_EQ(checksum(m->data(), m->size()), first);
    EXPECT_EQ(m->data()[(11u << 20) + 12345], static_cast<unsigned char>((11 * 131 + 12345 * 7) & 0xff));
  }
  fs::remove(path);
}

// release_file_pages: given only an address range, it drops the pages of a live mapping's bytes
// (which stay the same) and refuses, touching nothing, memory that is no file mapping and the
// range of a mapping that is gone.
TEST(ReleasePages, FilePagesByAddress) {
  fs::path path = temp_file("reforge_release_file_pages");
  {
    std::ofstream out(path, std::ios::binary);
    std::string block(1 << 20, '\0');
    for (size_t b = 0; b < kBytes / block.size(); ++b) {
      for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>((b * 17 + i * 3) & 0xff);
      out.write(block.data(), static_cast<std::streamsize>(block.size()));
    }
  }
  const void* gone = nullptr;
  {
    auto m = MappedFile::open(path.string());
    ASSERT_EQ(m->size(), kBytes);
    const uint64_t first = checksum(m->data(), m->size());
    const size_t touched = rss_file_bytes();
    // The second half, from an unaligned address (its first partial page stays).
    EXPECT_TRUE(release_file_pages(m->data() + kBytes / 2 + 100, kBytes / 2 - 100));
    const size_t released = rss_file_bytes();
    EXPECT_LE(released + kBytes * 4 / 10, touched) << "release_file_pages left the bytes resident";
    EXPECT_GE(released + kBytes * 6 / 10, touched) << "release_file_pages dropped more than its range";
    EXPECT_EQ(checksum(m->data(), m->size()), first);
    EXPECT_EQ(m->data()[(21u << 20) + 999], static_cast<unsigned char>((21 * 17 + 999 * 3) & 0xff));
    // A range that runs past the mapping's end is not inside it.
    EXPECT_FALSE(release_file_pages(m->data() + kBytes - 10, 20));
    gone = m->data();
  }
  EXPECT_FALSE(release_file_pages(gone, 4096)) << "a mapping that was unmapped is still known";
  std::vector<unsigned char> anon(kBytes, 7);
  EXPECT_FALSE(release_file_pages(anon.data(), anon.size()));
  EXPECT_EQ(checksum(anon.data(), anon.size()), checksum(std::vector<unsigned char>(kBytes, 7).data(), kBytes));
  fs::remove(path);
}

TEST(ReleasePages, CheckpointTensorsStayValid) {
  fs::path path = temp_file("reforge_release_pages.safetensors");
  Tensor t = Tensor::empty(DType::Float32, {static_cast<int64_t>(kBytes / 4)});
  auto* f = static_cast<float*>(t.mutable_raw());
  for (size_t i = 0; i < kBytes / 4; ++i) f[i] = static_cast<float>(i % 1000) * 0.5f;
  refit::write_safetensors(path.string(), {{"w", t}});
  {
    auto ckpt = refit::Checkpoint::open(path.string());
    const Tensor* w = ckpt.find("w");
    ASSERT_NE(w, nullptr);
    const auto* bytes = static_cast<const unsigned char*>(w->raw());
    uint64_t first = checksum(bytes, w->nbytes());
    size_t touched = rss_file_bytes();
    ckpt.release_pages();
    EXPECT_LE(rss_file_bytes() + kBytes * 9 / 10, touched) << "Checkpoint::release_pages left the file resident";
    EXPECT_EQ(checksum(bytes, w->nbytes()), first);
    EXPECT_EQ(static_cast<const float*>(w->raw())[123457], static_cast<float>(123457 % 1000) * 0.5f);
  }
  fs::remove(path);
}

// CommitOptions::release: called for every value set (and only those), after validation has read
// it and after the last recipe that reads it; the staged weights are those of a refit without it.
TEST(ReleasePages, RefitReleasesEachValueSetAfterItsLastUse) {
  runtime::PlanEngine e(test_support::llama_plan(plan::BuildMode::Refit, false));
  const auto sources = build::read_sources_from_onnx(e.plan(), test_support::kLlamaB);
  std::map<const void*, int> given;  // data pointer -> sources set to it (uses of one initializer share it)
  for (const auto& [id, t] : sources) ++given[t.raw()];

  refit::Refitter plain(e);
  for (const auto& [id, t] : sources) plain.set_source(id, t);
  const refit::StagedRefit reference = plain.stage();

  std::mutex mu;
  std::map<const void*, int> released;  // data pointer -> calls
  refit::CommitOptions o;
  refit::Refitter r(e);
  for (const auto& [id, t] : sources) r.set_source(id, t);
  o.release = [&](const Tensor& t) {
    std::lock_guard<std::mutex> lock(mu);
    ++released[t.raw()];
  };
  const refit::StagedRefit staged = r.stage(o);

  ASSERT_EQ(released.size(), given.size());
  for (const auto& [ptr, calls] : released) {
    ASSERT_TRUE(given.count(ptr)) << "released a value that was not set";
    // Each source: once after validation, once after its last reader (if any).
    EXPECT_GE(calls, given[ptr]);
    EXPECT_LE(calls, 2 * given[ptr]);
  }
  ASSERT_EQ(staged.update.weights().size(), reference.update.weights().size());
  for (const auto& [name, t] : reference.update.weights()) {
    const Tensor* mine = staged.update.weight(name);
    ASSERT_NE(mine, nullptr) << name;
    EXPECT_TRUE(transforms::bit_equal(*mine, t)) << name;
  }
}
