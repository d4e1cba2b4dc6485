// Every CUDA kernel swept against its reference kernel (ggml's test-backend-ops is the model;
// cuda_sweep/sweep.h says how cases are made). The kernel list is the registry's, read at run
// time: backends::kernels().entries("cuda"), one entry per (domain, op, opset range).
//
// CudaSweep.EveryKernelHasValidCases needs a CUDA build but no GPU: every registration has a
// generator that makes cases for its opset range, placement puts a node of that op on "cuda" in
// every case (its kernel's checkers accept it), and the reference kernels run every case. A
// kernel without cases fails it, listing them. The family tests (CudaSweep.Elementwise, ...) need a GPU: each case runs
// as a one-node graph on "cuda" (shape inputs as initializers; weight inputs once as initializers and once as graph
// inputs, as ONNX Runtime's op tester does) and through the reference kernels on the host, output by output: the same
// dtype and shape; float outputs NaN where the reference is NaN, the same infinity where it is infinite, finite where
// it is finite, and over the rest a normalized mean squared error sum (a-b)^2 / sum b^2 at most 1e-7 (float32), 1e-10
// (float64), 1e-5 (float16), 1e-4 (bfloat16); integer and bool outputs equal. Each family test prints, per
// registration, its cases, runs, input types and worst NMSE per output type.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "backends/backend.h"
#include "backends/placement.h"
#include "cuda_sweep/sweep.h"
#include "ops/registry.h"
#include "runtime/engine.h"
#include "runtime/lowered_graph.h"
#include "support/cuda_compare.h"

using namespace reforge;
using namespace reforge::cuda_sweep;

namespace {

const OpCases* generator_for(const std::string& domain, const std::string& op) {
  for (const OpCases& g : all_generators())
    if (g.domain == domain && g.op == op) return &g;
  return nullptr;
}

std::string registration_name(const backends::KernelDef& k) {
  std::string s = (k.domain.empty() ? "" : k.domain + "::") + k.op_type + " [" + std::to_string(k.since) + ", ";
  return s + (k.end == INT_MAX ? std::string("inf") : std::to_string(k.end)) + "]";
}

// The registration's cases: at its first opset, at each of the generator's versions inside its
// range, and at kModernOpset (clamped to the range). The reforge domain has one version.
std::vector<Case> cases_of(const OpCases& g, const backends::KernelDef& k) {
  std::set<int> opsets = {k.since};
  if (k.domain.empty()) {
    for (int v : g.versions)
      if (v >= k.since && v <= k.end) opsets.insert(v);
    opsets.insert(std::clamp(kModernOpset, k.since, k.end));
  }
  std::vector<Case> cases;
  for (int opset : opsets) {
    Gen gen(k.domain, k.op_type, opset);
    g.gen(gen);
    for (Case& c : gen.cases()) cases.push_back(std::move(c));
  }
  return cases;
}

std::string attr_str(const ir::Attribute& a) {
  std::ostringstream o;
  o << a.name << "=";
  if (!a.s.empty())
    o << a.s;
  else if (!a.ints.empty())
    o << shape_str(a.ints);
  else if (!a.floats.empty())
    o << a.floats.size() << " floats";
  else if (a.t.defined())
    o << a.t.describe();
  else if (a.type == ir::AttrType::Float)
    o << a.f;
  else
    o << a.i;
  return o.str();
}

std::string label(const Case& c) {
  std::ostringstream o;
  o << (c.node.domain.empty() ? "" : c.node.domain + "::") << c.node.op_type << "-" << c.node.opset << " (";
  for (size_t i = 0; i < c.inputs.size(); ++i)
    o << (i ? ", " : "")
      << (c.inputs[i].defined() ? dtype_name(c.inputs[i].dtype()) + shape_str(c.inputs[i].shape()) : "-");
  o << ")";
  for (const auto& [name, a] : c.node.attrs) o << " " << attr_str(a);
  return o.str();
}

// The case as a graph: shape inputs are initializers, weight inputs too when `weights_constant`,
// other inputs graph inputs. `feed` receives the graph inputs' values.
ir::Graph graph_of(const Case& c, bool weights_constant, std::map<std::string, Tensor>* feed) {
  ir::Graph g;
  g.name = c.node.op_type + "_sweep";
  g.ir_version = 10;
  g.opsets[c.node.domain] = c.node.opset;
  if (!c.node.domain.empty()) g.opsets[""] = 17;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.node.inputs[i].empty()) continue;
    const ops::InputRole role = ops::input_role(c.node, i);
    if (role == ops::InputRole::kShape || (role == ops::InputRole::kWeight && weights_constant)) {
      g.initializers[c.node.inputs[i]] = c.inputs[i];
    } else {
      g.inputs.push_back(test_support::value_info(c.node.inputs[i], c.inputs[i].dtype(), c.inputs[i].shape()));
      (*feed)[c.node.inputs[i]] = c.inputs[i];
    }
  }
  g.nodes.push_back(c.node);
  for (const auto& o : c.node.outputs) {
    if (o.empty()) continue;
    ir::ValueInfo v;
    v.name = o;
    g.outputs.push_back(v);
  }
  return g;
}

bool has_weight_input(const Case& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (!c.node.inputs[i].empty() && ops::input_role(c.node, i) == ops::InputRole::kWeight) return true;
  return false;
}

// The graph's outputs computed node by node on the host by each op's reference kernel (the CPU
// backend's kernel where an op has none: reforge's fused ops).
std::vector<Tensor> reference_outputs(const ir::Graph& g, const std::map<std::string, Tensor>& feed) {
  std::map<std::string, Tensor> values = g.initializers;
  for (const auto& [name, t] : feed) values[name] = t;
  for (const ir::Node& n : g.nodes) {
    std::vector<const Tensor*> ins;
    for (const auto& name : n.inputs) ins.push_back(name.empty() ? nullptr : &values.at(name));
    const ops::OpDef* def = ops::OpRegistry::global().find(n.domain, n.op_type, n.opset);
    REFORGE_CHECK(def, n.label(), ": no registered op");
    const backends::Resolved host = def->kernel ? backends::Resolved{} : backends::host_kernel(n);
    const ops::KernelFn& kernel = def->kernel ? def->kernel : *host.kernel;
    const ops::PrepareFn* prepare = def->kernel ? &def->prepare : host.prepare;
    ops::HostPrepareContext host_context;
    std::shared_ptr<const void> prepared = prepare && *prepare ? (*prepare)(n, ins, host_context) : nullptr;
    ops::KernelContext ctx(n, ins, 1, nullptr, prepared.get());
    kernel(ctx);
    for (size_t k = 0; k < n.outputs.size(); ++k)
      if (!n.outputs[k].empty()) values[n.outputs[k]] = ctx.outputs()[k];
  }
  std::vector<Tensor> out;
  for (const auto& o : g.outputs) out.push_back(values.at(o.name));
  return out;
}

// "" when the placed graph runs a node of the swept op on "cuda", else why not.
std::string placed_on_cuda(const ir::Graph& placed, const std::vector<std::string>& placement,
                           const backends::KernelDef& k) {
  std::string where;
  for (size_t i = 0; i < placed.nodes.size(); ++i) {
    if (placed.nodes[i].domain != k.domain || placed.nodes[i].op_type != k.op_type) continue;
    if (placement[i] == "cuda") return "";
    where = placement[i];
  }
  return where.empty() ? "no node of the op is in the placed graph" : "the op's node is placed on " + where;
}

double nmse_bound(DType t) {
  switch (t) {
    case DType::Float32:
      return 1e-7;
    case DType::Float64:
      return 1e-10;
    case DType::Float16:
      return 1e-5;
    default:
      return 1e-4;
  }
}

// "" when `got` matches `want` (see the file comment); else the first difference. `nmse`
// receives the float error (0 for other types).
std::string compare(const Tensor& got, const Tensor& want, double* nmse) {
  *nmse = 0;
  if (got.dtype() != want.dtype())
    return "dtype " + dtype_name(got.dtype()) + ", reference " + dtype_name(want.dtype());
  if (got.shape() != want.shape()) return "shape " + shape_str(got.shape()) + ", reference " + shape_str(want.shape());
  if (!is_float(want.dtype())) {
    for (int64_t i = 0; i < want.numel(); ++i)
      if (got.as_int64(i) != want.as_int64(i))
        return "element " + std::to_string(i) + " is " + std::to_string(got.as_int64(i)) + ", reference " +
               std::to_string(want.as_int64(i));
    return "";
  }
  double num = 0, den = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = got.as_double(i), b = want.as_double(i);
    const bool same_kind = std::isnan(b) ? std::isnan(a) : std::isinf(b) ? a == b : std::isfinite(a);
    if (!same_kind) {
      std::ostringstream o;
      o << "element " << i << " is " << a << ", reference " << b;
      return o.str();
    }
    if (!std::isfinite(b)) continue;
    num += (a - b) * (a - b);
    den += b * b;
  }
  *nmse = den == 0 ? num : num / den;
  if (*nmse > nmse_bound(want.dtype())) {
    std::ostringstream o;
    o << "NMSE " << *nmse << " exceeds " << nmse_bound(want.dtype());
    return o.str();
  }
  return "";
}

struct Stats {
  int cases = 0, runs = 0, failures = 0;
  std::set<std::string> dtypes;   // of the inputs
  std::map<DType, double> worst;  // the worst NMSE per float output type
};

// Runs `c` on "cuda" (both ways for weight inputs) against the reference; "" or what failed.
std::string run_case(const Case& c, const backends::KernelDef& k, Stats& stats) {
  std::map<std::string, Tensor> ref_feed;
  const ir::Graph ref_graph = graph_of(c, true, &ref_feed);
  std::vector<Tensor> want;
  try {
    want = reference_outputs(ref_graph, ref_feed);
  } catch (const Error& e) {
    return std::string("the reference failed: ") + e.what();
  }
  for (bool weights_constant : {true, false}) {
    if (!weights_constant && !has_weight_input(c)) break;
    std::map<std::string, Tensor> feed;
    ir::Graph g = graph_of(c, weights_constant, &feed);
    std::vector<Tensor> got;
    try {
      runtime::LoweredGraph lowered = runtime::lower_without_passes(std::move(g), "cuda");
      if (std::string why = placed_on_cuda(lowered.graph(), lowered.placement(), k); !why.empty()) return why;
      got = runtime::Engine(std::move(lowered)).run(feed);
    } catch (const Error& e) {
      return std::string("the CUDA run failed: ") + e.what();
    }
    ++stats.runs;
    if (got.size() != want.size()) return "CUDA gave " + std::to_string(got.size()) + " outputs";
    for (size_t i = 0; i < want.size(); ++i) {
      double nmse = 0;
      const std::string diff = compare(got[i], want[i], &nmse);
      if (!diff.empty()) return "output " + std::to_string(i) + ": " + diff;
      if (is_float(want[i].dtype())) stats.worst[want[i].dtype()] = std::max(stats.worst[want[i].dtype()], nmse);
    }
  }
  for (const auto& t : c.inputs)
    if (t.defined()) stats.dtypes.insert(dtype_name(t.dtype()));
  return "";
}

void run_family(const std::string& family) {
  int registrations = 0, cases = 0;
  for (const backends::KernelDef* k : backends::kernels().entries("cuda")) {
    const OpCases* g = generator_for(k->domain, k->op_type);
    if (!g || g->family != family) continue;
    ++registrations;
    Stats stats;
    int shown = 0;
    for (const Case& c : cases_of(*g, *k)) {
      ++stats.cases;
      const std::string why = run_case(c, *k, stats);
      if (why.empty()) continue;
      ++stats.failures;
      if (shown++ < 4) ADD_FAILURE() << label(c) << ": " << why;
    }
    cases += stats.cases;
    std::string dtypes, worst;
    for (const auto& d : stats.dtypes) dtypes += " " + d;
    for (const auto& [t, e] : stats.worst) worst += " " + dtype_name(t) + " " + str_cat(std::setprecision(2), e);
    std::printf("[sweep] %-32s %4d cases %4d runs %3d failed; worst NMSE:%s; inputs:%s\n",
                registration_name(*k).c_str(), stats.cases, stats.runs, stats.failures,
                worst.empty() ? " -" : worst.c_str(), dtypes.c_str());
  }
  std::printf("[sweep] %s: %d registrations, %d cases\n", family.c_str(), registrations, cases);
  EXPECT_GT(registrations, 0) << "no CUDA kernel of family " << family;
}

TEST(CudaSweep, EveryKernelHasValidCases) {
  REQUIRE_CUDA_BUILD();
  std::vector<std::string> uncovered, invalid;
  std::set<std::pair<std::string, std::string>> swept;
  size_t registrations = 0, total = 0;
  for (const backends::KernelDef* k : backends::kernels().entries("cuda")) {
    ++registrations;
    swept.insert({k->domain, k->op_type});
    const OpCases* g = generator_for(k->domain, k->op_type);
    const std::vector<Case> cases = g ? cases_of(*g, *k) : std::vector<Case>{};
    total += cases.size();
    if (cases.empty()) uncovered.push_back(registration_name(*k));
    for (const Case& c : cases) {
      std::map<std::string, Tensor> feed;
      ir::Graph graph = graph_of(c, true, &feed);
      try {
        reference_outputs(graph, feed);
        const backends::PlaceResult placed = backends::place_graph(graph, {"cuda", false, ""});
        const std::string why = placed_on_cuda(graph, placed.node_backend, *k);
        if (!why.empty()) invalid.push_back(label(c) + ": " + why);
      } catch (const Error& e) {
        invalid.push_back(label(c) + ": " + e.what());
      }
    }
  }
  std::printf("[sweep] %zu CUDA kernel registrations of %zu ops, %zu cases\n", registrations, swept.size(), total);
  EXPECT_GT(registrations, 0u);
  std::string list;
  for (const auto& u : uncovered) list += "\n  " + u;
  EXPECT_TRUE(uncovered.empty()) << uncovered.size() << " CUDA kernel registrations have no sweep cases "
                                 << "(add a generator in tests/cuda_sweep/):" << list;
  list.clear();
  for (size_t i = 0; i < invalid.size() && i < 40; ++i) list += "\n  " + invalid[i];
  EXPECT_TRUE(invalid.empty()) << invalid.size() << " sweep cases are not valid:" << list;
  for (const OpCases& g : all_generators())
    EXPECT_TRUE(swept.count({g.domain, g.op})) << "a sweep generator for " << g.op << " has no CUDA kernel";
}

TEST(CudaSweep, Elementwise) {
  REQUIRE_GPU();
  run_family("elementwise");
}
TEST(CudaSweep, Unary) {
  REQUIRE_GPU();
  run_family("unary");
}
TEST(CudaSweep, Layout) {
  REQUIRE_GPU();
  run_family("layout");
}
TEST(CudaSweep, Tensor) {
  REQUIRE_GPU();
  run_family("tensor");
}
TEST(CudaSweep, Reduce) {
  REQUIRE_GPU();
  run_family("reduce");
}
TEST(CudaSweep, NN) {
  REQUIRE_GPU();
  run_family("nn");
}
TEST(CudaSweep, Norm) {
  REQUIRE_GPU();
  run_family("norm");
}
TEST(CudaSweep, Transformer) {
  REQUIRE_GPU();
  run_family("transformer");
}

}  // namespace
