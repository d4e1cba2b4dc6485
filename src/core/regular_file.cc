#include "core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace reforge {

std::string file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a file";
}

std::string byte_size_str(uint64_t n) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (n < 1024) return str_cat(n, n == 1 ? " byte" : " bytes");
  double v = static_cast<double>(n);
  int u = -1;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  // Whole units print without a fraction ("64 MiB"), others with one digit ("3.0 GiB" rounds).
  char buf[32];
  if (v == static_cast<double>(static_cast<uint64_t>(v)))
    std::snprintf(buf, sizeof buf, "%llu %s", static_cast<unsigned long long>(v), units[u]);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

RegularFile RegularFile::open(const std::string& path, const std::string& what) {
  RegularFile f;
  f.subject_ = what.empty() ? "'" + path + "'" : what + " '" + path + "'";
  // stat first: a device or FIFO is refused without being opened (opening one can block, or
  // have effects of its own). O_NONBLOCK covers a FIFO put in the path's place in between; the
  // fstat of what was opened is the check that counts.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("cannot open ", f.subject_, ": ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(f.subject_, " is ", file_type_name(st.st_mode), ", not a regular file");
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (f.fd_ < 0) fail("cannot open ", f.subject_, ": ", std::strerror(errno));
  if (::fstat(f.fd_, &st) != 0) fail("cannot stat ", f.subject_, ": ", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(f.subject_, " is ", file_type_name(st.st_mode), ", not a regular file");
  // Blocking reads from here on (a regular file's reads do not block either way).
  int flags = ::fcntl(f.fd_, F_GETFL);
  if (flags >= 0) ::fcntl(f.fd_, F_SETFL, flags & ~O_NONBLOCK);
  f.size_ = static_cast<uint64_t>(st.st_size);
  return f;
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : fd_(other.fd_), size_(other.size_), subject_(std::move(other.subject_)) {
  other.fd_ = -1;
}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    size_ = other.size_;
    subject_ = std::move(other.subject_);
    other.fd_ = -1;
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string read_regular_file(const std::string& path, size_t max_bytes, const std::string& what) {
  RegularFile f = RegularFile::open(path, what);
  auto too_large = [&](const std::string& size) {
    fail(f.subject(), " is ", size, ", larger than the ", byte_size_str(max_bytes), " a ", what.empty() ? "file" : what,
         " may be");
  };
  if (f.size() > max_bytes) too_large(byte_size_str(f.size()));
  std::string out;
  out.resize(static_cast<size_t>(f.size()));
  size_t have = 0;
  for (;;) {
    if (have == out.size()) {
      // The size fstat gave is read; one more byte tells whether the file grew past it.
      if (out.size() > max_bytes) too_large("more than " + byte_size_str(max_bytes));
      out.resize(std::min(max_bytes + 1, std::max<size_t>(out.size() * 2, out.size() + 4096)));
    }
    ssize_t r = ::read(f.fd(), out.data() + have, out.size() - have);
    if (r < 0) {
      if (errno == EINTR) continue;
      fail("cannot read ", f.subject(), ": ", std::strerror(errno));
    }
    if (r == 0) break;
    have += static_cast<size_t>(r);
  }
  if (have > max_bytes) too_large("more than " + byte_size_str(max_bytes));
  out.resize(have);
  return out;
}

}  // namespace reforge
