// Read-only memory-mapped files. The mapping lives as long as any shared_ptr to it, so tensors
// that wrap mapped bytes keep the file mapped.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace reforge {

class MappedFile {
 public:
  // Maps the whole file; throws an Error naming the path (after `what`, e.g. "checkpoint", when
  // given) if it cannot be opened or mapped, or is not a regular file (RegularFile::open: a FIFO
  // or device is refused without blocking).
  static std::shared_ptr<const MappedFile> open(const std::string& path, const std::string& what = "");
  ~MappedFile();
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the pages of the mapping that are resident in this process (madvise MADV_DONTNEED):
  // its bytes stay readable and unchanged (the mapping is read-only; a later read pages them in
  // again from the file), but they stop counting in the process's resident memory. For a reader
  // done with a large file whose bytes nothing else here reads soon (a checkpoint once bound).
  void release_pages() const;
  // The same for the whole pages inside [p, p + n) (the pages it shares with neighbouring bytes
  // stay); false, doing nothing, when that range is not inside this mapping.
  bool release_pages(const void* p, size_t n) const;

 private:
  MappedFile() = default;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace reforge
