// Opening files whose paths come from a user or from another file (a model's external data, a
// checkpoint index). Only regular files are read: a directory, FIFO, socket or device is refused
// by name before it is opened, so a FIFO cannot block the open and /dev/zero cannot feed an
// endless read; and a whole-file read has a bound, checked before any byte is read.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace reforge {

// A read-only descriptor of a regular file, closed when destroyed.
class RegularFile {
 public:
  // Opens `path` for reading. Throws an Error naming the path (after `what`, e.g. "bind file",
  // when given) if it cannot be opened or is not a regular file:
  //   "bind file '/tmp/p' is a FIFO, not a regular file".
  static RegularFile open(const std::string& path, const std::string& what = "");
  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();

  int fd() const { return fd_; }
  // The size fstat reported when opened.
  uint64_t size() const { return size_; }
  // `what` and the path as errors name them: "bind file '/tmp/p'" or "'/tmp/p'".
  const std::string& subject() const { return subject_; }

 private:
  RegularFile() = default;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string subject_;
};

// The whole of the regular file `path`, at most `max_bytes` of it: a larger file is refused
// before it is read ("bind file 'b.json' is 3.0 GiB, larger than the 64 MiB a bind file may
// be"), and so is one that grows past the bound while read (a file of /proc reports size 0).
// `what` names the kind of file in errors ("bind file").
std::string read_regular_file(const std::string& path, size_t max_bytes, const std::string& what);

// What a file mode is, for errors: "a directory", "a FIFO", "a character device", ...
std::string file_type_name(mode_t mode);

// A byte count for people: "512 bytes", "64 MiB", "3.0 GiB".
std::string byte_size_str(uint64_t n);

}  // namespace reforge
