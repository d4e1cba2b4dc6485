// Plan reader: plan::parse_plan on the bytes, loading and hash-verifying every weight.
#include <cstring>
#include <memory>

#include "fuzz_target.h"
#include "plan/plan_io.h"

REFORGE_FUZZ_TARGET(plan) {
  try {
    auto owner = std::make_shared<std::string>(reinterpret_cast<const char*>(data), size);
    reforge::plan::Plan p = reforge::plan::parse_plan(owner, owner->data(), owner->size());
    (void)p;
  } catch (const reforge::Error&) {
  }
  return 0;
}
