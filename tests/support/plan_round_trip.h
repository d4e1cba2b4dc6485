// A plan written to bytes and read back, as a deployment would load it (the tests that check
// that what they built survives the file format).
#pragma once

#include <memory>
#include <string>

#include "plan/plan_io.h"

namespace reforge::test_support {

inline plan::Plan round_trip(const plan::Plan& p) {
  auto owner = std::make_shared<std::string>(plan::serialize_plan(p));
  return plan::parse_plan(owner, owner->data(), owner->size());
}

}  // namespace reforge::test_support
