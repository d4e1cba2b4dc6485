// Bind-file reader: build::parse_bind_file on the text of a --bind-file JSON.
#include <string>

#include "builder/binding.h"
#include "fuzz_target.h"

REFORGE_FUZZ_TARGET(bind_file) {
  try {
    auto b = reforge::build::parse_bind_file(std::string(reinterpret_cast<const char*>(data), size), "fuzz bind file");
    (void)b;
  } catch (const reforge::Error&) {
  }
  return 0;
}
