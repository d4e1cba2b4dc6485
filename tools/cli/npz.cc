#include "npz.h"

#include <zip.h>

#include <memory>
#include <vector>

#include "core/error.h"
#include "core/npy.h"

namespace reforge::cli {

std::map<std::string, Tensor> read_npz(const std::string& path) {
  int code = 0;
  std::unique_ptr<zip_t, void (*)(zip_t*)> archive(zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code),
                                                    [](zip_t* z) { zip_discard(z); });
  if (!archive) {
    zip_error_t error;
    zip_error_init_with_code(&error, code);
    const std::string why = zip_error_strerror(&error);
    zip_error_fini(&error);
    fail("'", path, "' is not a readable .npz archive (a zip archive of .npy files): ", why);
  }
  std::map<std::string, Tensor> arrays;
  const zip_int64_t n = zip_get_num_entries(archive.get(), 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(archive.get(), static_cast<zip_uint64_t>(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) ||
        !(st.valid & ZIP_STAT_SIZE))
      fail("'", path, "': entry ", i, " cannot be read: ", zip_strerror(archive.get()));
    const std::string entry = st.name;
    if (!entry.empty() && entry.back() == '/') continue;  // a folder entry
    if (entry.size() <= 4 || entry.compare(entry.size() - 4, 4, ".npy") != 0)
      fail("'", path, "': entry '", entry, "' is not an array (NAME.npy); numpy.savez writes only those");
    const std::string name = entry.substr(0, entry.size() - 4);
    if (arrays.count(name)) fail("'", path, "': array '", name, "' is in the archive twice");
    std::vector<unsigned char> bytes(static_cast<size_t>(st.size));
    std::unique_ptr<zip_file_t, int (*)(zip_file_t*)> file(zip_fopen_index(archive.get(), static_cast<zip_uint64_t>(i), 0),
                                                            zip_fclose);
    if (!file) fail("'", path, "': entry '", entry, "' cannot be opened: ", zip_strerror(archive.get()));
    const zip_int64_t got = bytes.empty() ? 0 : zip_fread(file.get(), bytes.data(), bytes.size());
    if (got < 0 || static_cast<zip_uint64_t>(got) != st.size)
      fail("'", path, "': entry '", entry, "' cannot be read whole: ", zip_file_strerror(file.get()));
    arrays[name] = parse_npy(bytes.data(), bytes.size(), "'" + path + "' array '" + name + "'");
  }
  if (arrays.empty()) fail("'", path, "' holds no arrays");
  return arrays;
}

}  // namespace reforge::cli
