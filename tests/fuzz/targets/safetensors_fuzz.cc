// Safetensors reader: refit::Checkpoint::parse on the bytes; every parsed tensor's bytes are read.
#include <memory>
#include <string>

#include "fuzz_target.h"
#include "refit/safetensors.h"

REFORGE_FUZZ_TARGET(safetensors) {
  try {
    auto owner = std::make_shared<std::string>(reinterpret_cast<const char*>(data), size);
    auto c = reforge::refit::Checkpoint::parse(owner, owner->data(), owner->size(), "fuzz input");
    for (const auto& [name, t] : c.tensors()) reforge::fuzz::touch(t.raw(), t.nbytes());
  } catch (const reforge::Error&) {
  }
  return 0;
}
