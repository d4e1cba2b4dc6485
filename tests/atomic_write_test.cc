// AtomicFile (core/atomic_file.h): the destination is the old file or the complete new one, an
// error leaves nothing, and a kill -9 mid-write leaves nothing on the O_TMPFILE path and, on the
// named path, a temporary that the next write to the same destination removes. The kills are
// real: a forked child writes through the helper and is sent SIGKILL mid-write, and the CLI is
// killed by the kernel mid-write. Each kill lands mid-write by construction (the child says so
// and waits, or the kernel kills at a file-size limit), never by how the processes are scheduled.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "onnx/exporter.h"
#include "support/cli.h"
#include "support/synthetic_llama.h"

namespace fs = std::filesystem;
using namespace reforge;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

// Sets or clears REFORGE_NO_O_TMPFILE for the scope (children forked inside inherit it).
struct NamedTemporaries {
  explicit NamedTemporaries(bool on) {
    if (on)
      ::setenv("REFORGE_NO_O_TMPFILE", "1", 1);
    else
      ::unsetenv("REFORGE_NO_O_TMPFILE");
  }
  ~NamedTemporaries() { ::unsetenv("REFORGE_NO_O_TMPFILE"); }
};

class AtomicWrite : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("REFORGE_NO_O_TMPFILE");
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::temp_directory_path() / ("reforge_atomic_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    ::unsetenv("REFORGE_NO_O_TMPFILE");
    fs::remove_all(dir_);
  }

  // Forks a child that writes `dest` through AtomicFile: one 1 MiB chunk, a byte on the pipe
  // to say so, then waits, mid-write, forever. Returns once the first chunk is written; the
  // caller kills the child.
  pid_t start_slow_writer(const fs::path& dest) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      try {
        AtomicFile f(dest.string());
        std::string chunk(1 << 20, 'n');
        f.write(chunk.data(), chunk.size());
        char c = f.unnamed() ? 'u' : 'n';
        if (::write(p[1], &c, 1) != 1) ::_exit(3);
        for (;;) ::pause();
      } catch (...) {
        ::_exit(2);
      }
    }
    ::close(p[1]);
    char c = 0;
    EXPECT_EQ(::read(p[0], &c, 1), 1) << "the writer child failed before its first chunk";
    ::close(p[0]);
    child_unnamed_ = c == 'u';
    return pid;
  }

  static void kill9(pid_t pid) {
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int st = 0;
    ASSERT_EQ(::waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "status " << st;
  }

  fs::path dir_;
  bool child_unnamed_ = false;
};

TEST_F(AtomicWrite, WritesAndReplacesAtomically) {
  for (bool named : {false, true}) {
    SCOPED_TRACE(named ? "named temporary" : "O_TMPFILE");
    NamedTemporaries env(named);
    fs::path dest = dir_ / "out.bin";
    fs::remove(dest);
    {
      AtomicFile f(dest.string());
      EXPECT_EQ(f.unnamed(), !named);
      f.write("first", 5);
      EXPECT_FALSE(fs::exists(dest)) << "visible before commit";
      f.commit();
    }
    EXPECT_EQ(slurp(dest), "first");
    EXPECT_EQ(listing(dir_), std::set<std::string>{"out.bin"});

    // The mode is what open(O_CREAT, 0666) gives under the process umask, on both paths.
    mode_t mask = ::umask(022);
    ::umask(mask);
    struct stat st {};
    ASSERT_EQ(::stat(dest.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0666u & ~mask);

    {
      AtomicFile f(dest.string());
      std::string big(3 << 20, 'x');
      f.write(big.data(), big.size());
      EXPECT_EQ(slurp(dest), "first") << "replaced before commit";
      f.commit();
      EXPECT_EQ(slurp(dest), big);
    }
    EXPECT_EQ(listing(dir_), std::set<std::string>{"out.bin"});

    // Abandoned (an error before commit): the old file stays and nothing else is left.
    {
      AtomicFile f(dest.string());
      f.write("partial", 7);
    }
    EXPECT_EQ(slurp(dest).size(), size_t(3 << 20));
    EXPECT_EQ(listing(dir_), std::set<std::string>{"out.bin"});
  }
}

TEST_F(AtomicWrite, ErrorsNameTheDestinationAndLeaveNothing) {
  for (bool named : {false, true}) {
    NamedTemporaries env(named);
    try {
      AtomicFile f((dir_ / "missing" / "out.plan").string(), "plan");
      FAIL() << "opened a file in a missing folder";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot write plan '" + (dir_ / "missing" / "out.plan").string() + "'"),
                std::string::npos)
          << e.what();
    }
  }
  // A destination that is a folder: rename fails at commit; the temporary is removed.
  fs::create_directories(dir_ / "adir" / "inside");
  for (bool named : {false, true}) {
    NamedTemporaries env(named);
    AtomicFile f((dir_ / "adir").string());
    f.write("x", 1);
    EXPECT_THROW(f.commit(), Error);
  }
  EXPECT_EQ(listing(dir_), std::set<std::string>{"adir"});
}

TEST_F(AtomicWrite, KillDuringWriteOnTheUnnamedPathLeavesNothing) {
  fs::path dest = dir_ / "model.plan";
  spit(dest, "old contents");
  pid_t pid = start_slow_writer(dest);
  if (!child_unnamed_) {
    kill9(pid);
    // Skipped only where the filesystem itself refuses O_TMPFILE; otherwise the helper must use it.
    int probe = ::open(dir_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    ASSERT_LT(probe, 0) << "O_TMPFILE works in " << dir_ << " but the helper wrote a named temporary";
    GTEST_SKIP() << "the filesystem of " << dir_ << " has no O_TMPFILE";
  }
  // The child is mid-write: it holds an unnamed file in the folder.
  kill9(pid);
  EXPECT_EQ(slurp(dest), "old contents");
  EXPECT_EQ(listing(dir_), std::set<std::string>{"model.plan"});
}

TEST_F(AtomicWrite, KillDuringWriteOnTheNamedPathIsCleanedByTheNextWrite) {
  NamedTemporaries env(true);
  fs::path dest = dir_ / "model.plan";
  spit(dest, "old contents");
  pid_t dead = start_slow_writer(dest);
  ASSERT_FALSE(child_unnamed_);
  kill9(dead);
  EXPECT_EQ(slurp(dest), "old contents");
  std::set<std::string> after_kill = listing(dir_);
  std::string dead_prefix = "model.plan.tmp." + std::to_string(dead) + ".";
  std::vector<std::string> left;
  for (const auto& n : after_kill)
    if (n.rfind(dead_prefix, 0) == 0) left.push_back(n);
  ASSERT_EQ(left.size(), 1u) << "kill -9 on the named path leaves its temporary";
  EXPECT_GE(fs::file_size(dir_ / left[0]), size_t(1 << 20));

  // Temporaries of live processes: this test's own, and a sleeping child's.
  pid_t sleeper = ::fork();
  if (sleeper == 0) {
    ::pause();
    ::_exit(0);
  }
  std::string mine = "model.plan.tmp." + std::to_string(::getpid()) + ".999999";
  std::string sleepers = "model.plan.tmp." + std::to_string(sleeper) + ".0";
  // Names that only look alike: another destination, a pid that is not a number.
  std::string other = "other.plan.tmp." + std::to_string(dead) + ".0";
  std::string odd = "model.plan.tmp.x" + std::to_string(dead) + ".0";
  for (const auto& n : {mine, sleepers, other, odd}) spit(dir_ / n, "keep");

  {
    AtomicFile f(dest.string());
    f.write("new contents", 12);
    f.commit();
  }
  EXPECT_EQ(slurp(dest), "new contents");
  std::set<std::string> expect{"model.plan", mine, sleepers, other, odd};
  EXPECT_EQ(listing(dir_), expect);

  kill9(sleeper);
  // Now the sleeper is dead too; the next write (on either path) removes its temporary.
  ::unsetenv("REFORGE_NO_O_TMPFILE");
  EXPECT_EQ(remove_stale_temporaries(dest.string()), 1u);
  expect.erase(sleepers);
  EXPECT_EQ(listing(dir_), expect);
}

// The CLI: `reforge build MODEL -o OUT` killed mid-write. The kernel kills it: the child runs
// under a file-size limit far below the plan's size, so the write that crosses it raises SIGXFSZ,
// whose default action ends the process at once, running none of its code (as kill -9 would).
// Where it dies depends on the plan's bytes, not on how the processes are scheduled.
class AtomicWriteCli : public AtomicWrite {
 protected:
  static constexpr rlim_t kFileLimit = 64 << 10;

  void SetUp() override {
    AtomicWrite::SetUp();
    model_ = dir_ / "model.onnx";
    onnx::write_model_file(synth::synthetic_llama(synth::LlamaSpec{}), model_.string());
  }

  // Runs the build under the file-size limit; expects it to die of SIGXFSZ. Returns its pid.
  pid_t build_killed_mid_write(const fs::path& out) {
    pid_t pid = ::fork();
    if (pid == 0) {
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      const rlimit fsize{kFileLimit, kFileLimit};
      const rlimit core{1, 1};  // 1: no core file, and no core piped to a handler either
      if (::setrlimit(RLIMIT_FSIZE, &fsize) != 0 || ::setrlimit(RLIMIT_CORE, &core) != 0) ::_exit(126);
      ::signal(SIGXFSZ, SIG_DFL);
      sigset_t none;
      ::sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execl(REFORGE_CLI_PATH, "reforge", "build", model_.c_str(), "-o", out.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int st = 0;
    EXPECT_EQ(::waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGXFSZ)
        << "the build was not killed mid-write (status " << st << "): its plan fits in " << kFileLimit << " bytes?";
    return pid;
  }

  // The plan a build that is not killed writes: larger than the limit, so the kill was mid-write.
  void expect_complete_build(const fs::path& out) {
    auto r = test_support::run_cli("build " + model_.string() + " -o " + out.string());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_GT(fs::file_size(out), 4 * kFileLimit);
  }

  fs::path model_;
};

TEST_F(AtomicWriteCli, KilledBuildLeavesNoTemporary) {
  fs::path out = dir_ / "out.plan";
  const std::set<std::string> before = listing(dir_);
  build_killed_mid_write(out);
  // A named temporary left behind fails this too: the helper must not fall back where O_TMPFILE
  // works.
  EXPECT_EQ(listing(dir_), before) << "a killed build left a file behind";
  expect_complete_build(out);
}

TEST_F(AtomicWriteCli, KilledBuildOnTheNamedPathIsCleanedByTheNextBuild) {
  NamedTemporaries env(true);
  fs::path out = dir_ / "out.plan";
  pid_t pid = build_killed_mid_write(out);
  const std::string prefix = "out.plan.tmp." + std::to_string(pid) + ".";
  std::vector<std::string> left;
  for (const auto& n : listing(dir_))
    if (n.rfind(prefix, 0) == 0) left.push_back(n);
  ASSERT_EQ(left.size(), 1u) << "a build killed on the named path leaves its temporary";
  EXPECT_EQ(fs::file_size(dir_ / left[0]), kFileLimit) << "written up to the limit";
  EXPECT_FALSE(fs::exists(out));

  expect_complete_build(out);
  EXPECT_EQ(listing(dir_), (std::set<std::string>{"model.onnx", "out.plan"}));
}

}  // namespace
