#include "core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace reforge {

namespace {

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool all_digits(const std::string& s, size_t begin, size_t end) {
  if (begin >= end) return false;
  for (size_t i = begin; i < end; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

bool o_tmpfile_disabled() {
  const char* v = std::getenv("REFORGE_NO_O_TMPFILE");
  return v && *v && std::strcmp(v, "0") != 0;
}

std::atomic<uint64_t> g_counter{0};

std::string next_temp_name(const std::string& path) {
  return str_cat(path, ".tmp.", ::getpid(), ".", g_counter.fetch_add(1));
}

}  // namespace

size_t remove_stale_temporaries(const std::string& path) {
  const std::string dir = parent_dir(path);
  const std::string prefix = base_name(path) + ".tmp.";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  size_t removed = 0;
  const pid_t self = ::getpid();
  while (dirent* ent = ::readdir(d)) {
    std::string name = ent->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    // The rest must be exactly "<pid>.<n>".
    size_t dot = name.find('.', prefix.size());
    if (dot == std::string::npos || !all_digits(name, prefix.size(), dot) || !all_digits(name, dot + 1, name.size()))
      continue;
    if (dot - prefix.size() > 9) continue;  // not a pid
    pid_t pid = static_cast<pid_t>(std::stol(name.substr(prefix.size(), dot - prefix.size())));
    if (pid <= 0 || pid == self) continue;
    // Only a process that certainly does not exist: EPERM means it exists under another user.
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    if (::unlinkat(::dirfd(d), name.c_str(), 0) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

AtomicFile::AtomicFile(std::string path, std::string what) : path_(std::move(path)), what_(std::move(what)) {
  remove_stale_temporaries(path_);
  const std::string dir = parent_dir(path_);
  // linkat needs /proc/self/fd to give an unnamed file a name.
  if (!o_tmpfile_disabled() && ::access("/proc/self/fd", F_OK) == 0) {
    fd_ = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
    if (fd_ >= 0) {
      unnamed_ = true;
      return;
    }
    // Anything but "this filesystem or kernel has no O_TMPFILE" is an error the named path
    // would hit too (missing folder, no permission).
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
      fail("cannot write ", what_, " '", path_, "': cannot create a file in '", dir, "': ", std::strerror(errno));
  }
  for (int attempt = 0; fd_ < 0; ++attempt) {
    tmp_ = next_temp_name(path_);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt > 100)) {
      int e = errno;
      tmp_.clear();  // a temporary's name means nothing to the user: the destination's folder does
      fail("cannot write ", what_, " '", path_, "': cannot create a file in '", dir, "': ", std::strerror(e));
    }
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::fail_io(const std::string& doing, int err) const {
  // The reason and the step, never the temporary's name: the user knows the destination only.
  fail("cannot write ", what_, " '", path_, "': ", doing, ": ", std::strerror(err));
}

void AtomicFile::write(const void* data, size_t n) {
  REFORGE_ASSERT(fd_ >= 0 && !committed_);
  const char* c = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, c, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail_io("writing", errno);
    }
    if (w == 0) fail_io("writing", EIO);
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFile::commit() {
  REFORGE_ASSERT(fd_ >= 0 && !committed_);
  if (::fsync(fd_) != 0) fail_io("flushing it to disk", errno);
  if (unnamed_) {
    // linkat cannot replace an existing file: link under a fresh name, then rename that. A kill
    // between the two leaves that name, which the next write's stale-temporary sweep removes.
    const std::string proc = str_cat("/proc/self/fd/", fd_);
    for (int attempt = 0;; ++attempt) {
      std::string name = next_temp_name(path_);
      if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
        tmp_ = std::move(name);
        break;
      }
      if (errno != EEXIST || attempt > 100) fail_io("giving it a name in the folder", errno);
    }
  }
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail_io("closing it", errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail_io("moving it into place", errno);
  committed_ = true;
  // Make the rename itself durable; the file is complete either way, so this is best effort.
  int dfd = ::open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace reforge
