// Op records (`ops=True`, TOKENTRACE_OPS): a RecordFunction observer that turns each ATen op
// into a tokentrace call nested in whatever call is open on the thread (the module call that
// issued it), so kernels launched inside an op attribute to the op and, through its parent, to
// the module. A host read of a device value (aten::item, aten::_local_scalar_dense,
// aten::is_nonzero) is then a call of that op: on CUDA the shim's synchronizing copy lands in
// it; on the CPU (no CUPTI) the observer reports the read itself when asked to (host_reads).
//
// Off costs nothing: the callback is added to torch's global list only by op_records_start and
// removed by op_records_stop, and torch skips RecordFunction entirely while no callback is
// registered. The C API of libtokentrace.so reaches us as function pointers from the Python
// extension (tokentrace._native.c_api()): this library does not link libtokentrace, and the
// extension's copy is not in the global symbol scope when Python loaded it RTLD_LOCAL.
//
// Threading: callbacks run on the thread that runs the op. Per-thread caches (op name -> site
// id, dtype -> text id) make the steady state free of locks and allocation on our side; a miss
// interns once through the C API. The function pointers are written before the callback is
// added and never change while it is registered (a second start is refused).
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <torch/library.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokentrace/tokentrace.h"

namespace tokentrace::torch_ops {
namespace {

// The C API entry points we call, in the order python/src/native.cc's c_api() lists them.
struct CApi {
  uint32_t (*site)(const char*, int) = nullptr;
  void (*push)(uint32_t) = nullptr;
  void (*pop)() = nullptr;
  uint32_t (*text)(const char*) = nullptr;
  void (*output_current)(uint32_t, uint32_t, int, const int64_t*) = nullptr;
  void (*escape)(int) = nullptr;
};
constexpr int64_t kCApiVersion = 1;  // bump with native.cc's c_api() when the list changes
constexpr int kSiteKindOp = TOKENTRACE_SITE_OP;
constexpr int kHostRead = 4;  // tokentrace_escape kind of a host read

CApi g_api;
bool g_host_reads = false;  // CPU model: report escape ops as host reads (no CUPTI to see them)
std::mutex g_mu;            // start/stop only
std::optional<at::CallbackHandle> g_handle;

struct CachedSite {
  std::string name;  // verifies a hit: names of string-described events are not stable
  uint32_t id = 0;
};

struct ThreadState {
  std::unordered_map<const char*, CachedSite> sites;  // keyed by RecordFunction::name()
  std::array<uint32_t, 64> dtype_ids{};               // by ScalarType, 0 = not interned yet
  std::array<uint32_t, 8> path_ids{};                 // "" then "[1]".."[7]"
  int escape_depth = 0;                               // open escape ops on this thread
};
thread_local ThreadState t_state;

bool IsEscapeOp(const char* name) {
  return std::strcmp(name, "aten::item") == 0 ||
         std::strcmp(name, "aten::_local_scalar_dense") == 0 ||
         std::strcmp(name, "aten::is_nonzero") == 0;
}

uint32_t SiteOf(const char* name) {
  auto [it, fresh] = t_state.sites.try_emplace(name);
  if (fresh || it->second.name != name) {
    it->second.name = name;
    it->second.id = g_api.site(name, kSiteKindOp);
  }
  return it->second.id;
}

// Context handed from start to end: whether this op is an escape op (so end closes its depth).
struct EscapeMark final : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> OnOpStart(const at::RecordFunction& fn) {
  const char* name = fn.name();
  g_api.push(SiteOf(name));
  if (!IsEscapeOp(name)) return nullptr;
  // Nested escape ops (is_nonzero -> item -> _local_scalar_dense) are one read: report it once,
  // in the outermost, which names what the caller asked for.
  if (t_state.escape_depth++ == 0 && g_host_reads) g_api.escape(kHostRead);
  return std::make_unique<EscapeMark>();
}

uint32_t DtypeId(c10::ScalarType st) {
  const auto i = static_cast<size_t>(st);
  if (i >= t_state.dtype_ids.size()) return g_api.text(c10::toString(st));
  uint32_t& id = t_state.dtype_ids[i];
  if (id == 0) {
    std::string word = c10::toString(st);  // "Float"; the Python views use torch's names
    const char* torch_name = st == at::kFloat      ? "float32"
                             : st == at::kHalf     ? "float16"
                             : st == at::kBFloat16 ? "bfloat16"
                             : st == at::kDouble   ? "float64"
                             : st == at::kLong     ? "int64"
                             : st == at::kInt      ? "int32"
                             : st == at::kBool     ? "bool"
                             : st == at::kByte     ? "uint8"
                                                   : nullptr;
    id = g_api.text(torch_name != nullptr ? torch_name : word.c_str());
  }
  return id;
}

uint32_t PathId(size_t index) {
  if (index >= t_state.path_ids.size()) return 0;
  uint32_t& id = t_state.path_ids[index];
  if (id == 0) id = g_api.text(index == 0 ? "" : ("[" + std::to_string(index) + "]").c_str());
  return id;
}

// The op's first tensor output (shape and dtype) goes on the op's call, which is still the
// innermost open call here.
void RecordFirstTensor(const at::RecordFunction& fn) {
  const std::vector<c10::IValue>& outputs = fn.outputs();
  for (size_t i = 0; i < outputs.size() && i < t_state.path_ids.size(); ++i) {
    const c10::IValue& v = outputs[i];
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return;
    const auto sizes = t.sizes();
    g_api.output_current(PathId(i), DtypeId(t.scalar_type()), static_cast<int>(sizes.size()),
                         sizes.data());
    return;
  }
}

void OnOpEnd(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  try {
    RecordFirstTensor(fn);
  } catch (...) {  // an odd tensor: the call stays, without its shape
  }
  if (ctx != nullptr && t_state.escape_depth > 0) --t_state.escape_depth;
  g_api.pop();
}

void Start(c10::ArrayRef<int64_t> api, bool host_reads) {
  std::lock_guard<std::mutex> lock(g_mu);
  TORCH_CHECK(!g_handle.has_value(),
              "tokentrace: op records are already on in this process (one trace at a time)");
  TORCH_CHECK(api.size() == 7 && api[0] == kCApiVersion,
              "tokentrace: the native extension and the torch ops library disagree on the C API "
              "(got ",
              api.size(), " entries, version ", api.empty() ? -1 : api[0],
              ", want 7 entries, version ", kCApiVersion, "); rebuild both with scripts/setup.sh");
  for (size_t i = 1; i < api.size(); ++i) {
    TORCH_CHECK(api[i] != 0, "tokentrace: C API entry ", i, " is null");
  }
  g_api.site = reinterpret_cast<uint32_t (*)(const char*, int)>(api[1]);
  g_api.push = reinterpret_cast<void (*)(uint32_t)>(api[2]);
  g_api.pop = reinterpret_cast<void (*)()>(api[3]);
  g_api.text = reinterpret_cast<uint32_t (*)(const char*)>(api[4]);
  g_api.output_current =
      reinterpret_cast<void (*)(uint32_t, uint32_t, int, const int64_t*)>(api[5]);
  g_api.escape = reinterpret_cast<void (*)(int)>(api[6]);
  g_host_reads = host_reads;
  // ATen ops only (scope FUNCTION): not user record_function ranges, not autograd nodes.
  g_handle = at::addGlobalCallback(at::RecordFunctionCallback(OnOpStart, OnOpEnd)
                                       .needsInputs(false)
                                       .needsOutputs(true)
                                       .scopes({at::RecordScope::FUNCTION}));
}

}  // namespace

// Removes the observer; 1 if it was on. A plain C function (python/tokentrace/_record/op_records.py
// calls it through ctypes), not an op: an op would be recorded as a call of its own. An op already
// running keeps its callbacks (RecordFunction snapshots them at start), so every push still
// gets its pop.
extern "C" __attribute__((visibility("default"))) int tokentrace_op_records_stop(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_handle.has_value()) return 0;
  try {
    at::removeCallback(*g_handle);
  } catch (...) {  // errors never cross a C boundary; the handle is gone either way
  }
  g_handle.reset();
  return 1;
}

// Added by an op: its own RecordFunction was made before the callback existed, so it is not
// recorded.
TORCH_LIBRARY_FRAGMENT(tokentrace, m) {
  m.def("op_records_start(int[] api, bool host_reads) -> ()");
}

TORCH_LIBRARY_IMPL(tokentrace, CompositeExplicitAutograd, m) { m.impl("op_records_start", Start); }

}  // namespace tokentrace::torch_ops
