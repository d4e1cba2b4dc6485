// Atomic file replacement. Every file reforge writes (plans, checkpoints, npy outputs, exported
// models) goes through AtomicFile, so that at any instant the destination is either the old file
// (or absent) or the complete new one, and an error or a kill leaves nothing behind.
//
// Where the filesystem supports it (Linux ext4, xfs, btrfs, tmpfs, ...) the bytes go into an
// unnamed file opened with O_TMPFILE in the destination's folder: a killed process leaves no
// name behind, and the kernel frees the space. commit() fsyncs it, links it under a unique
// temporary name (linkat through /proc/self/fd, since linkat cannot replace a file), renames
// that over the destination and fsyncs the folder.
//
// Elsewhere (O_TMPFILE unsupported, /proc not mounted, or REFORGE_NO_O_TMPFILE=1 in the
// environment, which tests use to force this path) the bytes go into a named temporary
// "<dest>.tmp.<pid>.<n>" created with O_EXCL. A process killed mid-write leaves that file; the
// next write to the same destination removes every "<dest>.tmp.<pid>.<n>" whose pid is not a
// live process (kill(pid, 0) fails with ESRCH). Temporaries of live processes are left alone.
//
// The new file gets mode 0666 & ~umask on both paths, as open(O_CREAT, 0666) gives. The
// destination's own mode and owner are not carried over: it is replaced, not rewritten.
#pragma once

#include <cstddef>
#include <string>

namespace reforge {

class AtomicFile {
 public:
  // Opens the temporary file next to `path`. `what` names the kind of file in error messages
  // ("plan", "checkpoint"): "cannot write plan 'out.plan': ...". Throws an Error on failure.
  explicit AtomicFile(std::string path, std::string what = "file");
  // Without a successful commit(), closes and removes the temporary file; `path` is untouched.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends n bytes (retrying short writes and EINTR). Throws an Error on failure.
  void write(const void* data, size_t n);
  // The open descriptor, for writers that stream to a descriptor themselves (protobuf). Writes
  // through it are part of the file; do not close it.
  int fd() const { return fd_; }

  // fsync, then replace `path` with the file. Throws an Error on failure (`path` untouched, the
  // temporary removed). The folder's fsync after the rename is best effort.
  void commit();

  // True when the bytes go into an unnamed O_TMPFILE file.
  bool unnamed() const { return unnamed_; }
  const std::string& path() const { return path_; }

 private:
  // "cannot write plan 'out.plan': writing: No space left on device" (no temporary's name).
  [[noreturn]] void fail_io(const std::string& doing, int err) const;

  std::string path_;
  std::string what_;
  std::string tmp_;  // the named temporary; for an unnamed file, set once it is linked
  int fd_ = -1;
  bool unnamed_ = false;
  bool committed_ = false;
};

// Removes "<path>.tmp.<pid>.<n>" files next to `path` whose pid is not a live process; returns
// how many it removed. AtomicFile calls it before every write; exposed for tests.
size_t remove_stale_temporaries(const std::string& path);

}  // namespace reforge
