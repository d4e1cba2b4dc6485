#include "backends/backend.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <tuple>

#include "backends/cpu/cpu_backend.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/regular_file.h"
#ifdef REFORGE_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace reforge::backends {

struct KernelRegistry::Impl {
  mutable std::shared_mutex mutex;
  std::vector<std::unique_ptr<Backend>> backends;
  // (backend, domain, op type) -> kernels; unique_ptr keeps found pointers stable.
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<std::unique_ptr<KernelDef>>> defs;
};

KernelRegistry::KernelRegistry() : impl_(new Impl) {}
KernelRegistry::~KernelRegistry() { delete impl_; }

namespace {

std::string op_name(const std::string& domain, const std::string& op_type) {
  return domain.empty() ? op_type : domain + "::" + op_type;
}

}  // namespace

// The process's registry; the built-in backends are registered on first use.
struct Global {
  static KernelRegistry& instance() {
    static KernelRegistry* r = [] {
      auto* reg = new KernelRegistry;
      add(*reg, cpu::backend());
#ifdef REFORGE_HAVE_CUDA
      add(*reg, cuda::backend());
#endif
      return reg;
    }();
    return *r;
  }
  static KernelRegistry::Impl& impl() { return *instance().impl_; }

  static void add(KernelRegistry& r, Backend b) {
    REFORGE_CHECK(!b.name.empty(), "internal error: a backend needs a name");
    REFORGE_CHECK(b.memory == Memory::Host || b.streams, "internal error: device backend '", b.name,
                  "' offers no DeviceStreams");
    {
      std::unique_lock lock(r.impl_->mutex);
      for (const auto& e : r.impl_->backends)
        REFORGE_CHECK(e->name != b.name, "backend '", b.name, "' is registered twice");
      r.impl_->backends.push_back(std::make_unique<Backend>(b));
    }
    if (b.register_kernels) b.register_kernels(r);
  }
};

void KernelRegistry::add(KernelDef def) {
  REFORGE_ASSERT(def.kernel != nullptr);
  REFORGE_ASSERT(def.since <= def.end);
  std::unique_lock lock(impl_->mutex);
  bool known = false;
  for (const auto& b : impl_->backends) known = known || b->name == def.backend;
  REFORGE_CHECK(known, "internal error: kernel of ", op_name(def.domain, def.op_type), " for unregistered backend '",
                def.backend, "'");
  auto& v = impl_->defs[{def.backend, def.domain, def.op_type}];
  for (const auto& d : v)
    REFORGE_CHECK(def.end < d->since || def.since > d->end, "internal error: overlapping ", def.backend,
                  " kernels for ", op_name(def.domain, def.op_type));
  v.push_back(std::make_unique<KernelDef>(std::move(def)));
}

const KernelDef* KernelRegistry::find(const std::string& backend, const std::string& domain, const std::string& op_type,
                                      int opset) const {
  std::shared_lock lock(impl_->mutex);
  auto it = impl_->defs.find({backend, domain, op_type});
  if (it == impl_->defs.end()) return nullptr;
  for (const auto& d : it->second)
    if (opset >= d->since && opset <= d->end) return d.get();
  return nullptr;
}

std::vector<const KernelDef*> KernelRegistry::entries(const std::string& backend) const {
  std::shared_lock lock(impl_->mutex);
  std::vector<const KernelDef*> out;
  for (const auto& [key, defs] : impl_->defs)
    if (std::get<0>(key) == backend)
      for (const auto& d : defs) out.push_back(d.get());
  return out;
}

void register_backend(Backend backend) { Global::add(Global::instance(), std::move(backend)); }

const Backend* find_backend(const std::string& name) {
  auto& r = Global::impl();
  std::shared_lock lock(r.mutex);
  for (const auto& b : r.backends)
    if (b->name == name) return b.get();
  return nullptr;
}

std::vector<std::string> backend_names() {
  auto& r = Global::impl();
  std::shared_lock lock(r.mutex);
  std::vector<std::string> out;
  for (const auto& b : r.backends) out.push_back(b->name);
  return out;
}

const KernelRegistry& kernels() { return Global::instance(); }

std::string resolve(const ir::Node& node, const std::string& backend, Resolved* out, const InputFacts* facts) {
  const Backend* b = find_backend(backend);
  if (!b) {
    std::string known;
    for (const auto& n : backend_names()) known += (known.empty() ? "" : ", ") + n;
    return "backend '" + backend + "' is not registered (registered: " + known + ")";
  }
  // The schema: the op must exist for this opset and its attributes be ones reforge supports.
  const std::string why = ops::OpRegistry::global().why_unsupported(node);
  if (!why.empty()) return why;
  const ops::OpDef* def = ops::OpRegistry::global().find(node.domain, node.op_type, node.opset);
  REFORGE_ASSERT(def != nullptr);
  std::string declined;
  if (const KernelDef* k = kernels().find(backend, node.domain, node.op_type, node.opset)) {
    std::string reason;
    try {
      if (k->check) reason = k->check(node);
      if (reason.empty() && facts && k->shape_check) reason = k->shape_check(node, *facts);
    } catch (const Error& e) {
      reason = e.what();
    }
    if (reason.empty()) {
      if (out) *out = {&k->kernel, &k->prepare, false, &k->sharing};
      return "";
    }
    declined = " (its kernel declines the node: " + reason + ")";
  }
  if (b->runs_reference_kernels && def->kernel) {
    if (out) *out = {&def->kernel, &def->prepare, true, &def->sharing};
    return "";
  }
  return "no kernel on backend '" + backend + "'" + declined;
}

Resolved host_kernel(const ir::Node& node) {
  Resolved r;
  const std::string why = resolve(node, kDefaultBackend, &r);
  if (!why.empty()) fail(node.label(), ": ", why);
  return r;
}

namespace {

TimingCache& timing_cache_of(const std::string& backend, const std::string& path) {
  const Backend* b = find_backend(backend);
  if (!b || !b->timing_cache)
    fail("timing cache '", path, "': backend '", backend,
         "' keeps no timing cache (build the plan with --device cuda)");
  return *b->timing_cache;
}

}  // namespace

bool load_timing_cache_file(const std::string& backend, const std::string& path) {
  TimingCache& cache = timing_cache_of(backend, path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return false;
  // A regular file of bounded size (a FIFO or device is refused, not read).
  cache.load(read_regular_file(path, size_t(64) << 20, "timing cache"), "timing cache '" + path + "'");
  return true;
}

void save_timing_cache_file(const std::string& backend, const std::string& path) {
  const std::string text = timing_cache_of(backend, path).save();
  AtomicFile f(path, "timing cache");
  f.write(text.data(), text.size());
  f.commit();
}

}  // namespace reforge::backends
