#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"
#include "core/file_pages.h"
#include "core/regular_file.h"

namespace reforge {

namespace {

// The live mappings by start address, for release_file_pages. A mapping is registered once
// mapped and unregistered before it is unmapped, under the same mutex as a release reads it, so
// a release never advises an address range that is no longer (or not yet) this file's.
struct Mappings {
  std::mutex mutex;
  std::map<const unsigned char*, const MappedFile*> by_start;
};

Mappings& mappings() {
  static Mappings* m = new Mappings;  // never destroyed: mappings may outlive static destruction
  return *m;
}

}  // namespace

bool release_file_pages(const void* p, size_t n) {
  if (!p || n == 0) return false;
  const auto* b = static_cast<const unsigned char*>(p);
  Mappings& m = mappings();
  std::lock_guard<std::mutex> lock(m.mutex);
  auto it = m.by_start.upper_bound(b);
  if (it == m.by_start.begin()) return false;
  return std::prev(it)->second->release_pages(p, n);
}

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, const std::string& what) {
  RegularFile f = RegularFile::open(path, what);
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = static_cast<size_t>(f.size());
  if (m->size_ > 0) {
    void* p = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, f.fd(), 0);
    if (p == MAP_FAILED) fail("cannot map ", f.subject(), ": ", std::strerror(errno));
    m->data_ = static_cast<const unsigned char*>(p);
    std::lock_guard<std::mutex> lock(mappings().mutex);
    mappings().by_start[m->data_] = m.get();
  }
  return m;
}

void MappedFile::release_pages() const {
  // Advice only: a failure leaves the pages resident, which is what not calling this does.
  if (data_) ::madvise(const_cast<unsigned char*>(data_), size_, MADV_DONTNEED);
}

bool MappedFile::release_pages(const void* p, size_t n) const {
  const auto* b = static_cast<const unsigned char*>(p);
  if (!data_ || b < data_ || n > size_ || static_cast<size_t>(b - data_) > size_ - n) return false;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(b) + page - 1) / page * page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(b) + n) / page * page;
  if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  return true;
}

MappedFile::~MappedFile() {
  if (!data_) return;
  {
    std::lock_guard<std::mutex> lock(mappings().mutex);
    mappings().by_start.erase(data_);
  }
  ::munmap(const_cast<unsigned char*>(data_), size_);
}

}  // namespace reforge
