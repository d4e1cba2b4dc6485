// .npy reader: parse_npy on the bytes; the parsed tensor's bytes are read.
#include "core/npy.h"
#include "fuzz_target.h"

REFORGE_FUZZ_TARGET(npy) {
  try {
    reforge::Tensor t = reforge::parse_npy(data, size, "fuzz input");
    reforge::fuzz::touch(t.raw(), t.nbytes());
  } catch (const reforge::Error&) {
  }
  return 0;
}
