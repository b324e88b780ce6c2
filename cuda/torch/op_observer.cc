// Op records (`ops=True`, TOKENTRACE_OPS): a RecordFunction observer that turns each ATen op
// into a tokentrace call nested in whatever call is open on the thread (the module call that
// issued it), so kernels launched inside an op attribute to the op and, through its parent, to
// the module. Each op's tensor arguments and outputs are recorded by identity (op_links: data
// flow, which op's output fed which). A host read of a device value (aten::item,
// aten::_local_scalar_dense, aten::is_nonzero) is then a call of that op: on CUDA the shim's
// synchronizing copy lands in it; on the CPU (no CUPTI) the observer reports the read itself when
// asked to (host_reads).
//
// Off costs nothing: the callback is added to torch's global list only by op_records_start and
// removed by op_records_stop, and torch skips RecordFunction entirely while no callback is
// registered. The C API of libtokentrace.so reaches us as the address of its versioned entry
// table (tokentrace_get_api, handed over by tokentrace._native.api_address()): this library
// does not link libtokentrace, and the extension's copy is not in the global symbol scope when
// Python loaded it RTLD_LOCAL. The table's struct_size and api_version are checked on entry.
//
// Threading: callbacks run on the thread that runs the op. Per-thread caches (op name -> site
// id, dtype -> text id) make the steady state free of locks and allocation on our side; a miss
// interns once through the C API. The function pointers are written before the callback is
// added and never change while it is registered (a second start is refused).
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <torch/library.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokentrace/tokentrace.h"

namespace tokentrace::torch_ops {
namespace {

// The part of the table we call: up to and including `pop_linked`. A library with a longer table
// (entries added at the end) still serves us; a shorter one or another API version does not.
constexpr size_t kApiSizeNeeded =
    offsetof(tokentrace_api, pop_linked) + sizeof(tokentrace_api::pop_linked);
constexpr int kSiteKindOp = TOKENTRACE_SITE_OP;
constexpr int kHostRead = 4;  // tokentrace_escape kind of a host read

tokentrace_api g_api{};     // a copy of the library's table, made by Start
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
  std::array<uint32_t, 64> path_ids{};                // "" then "[1]".."[63]"
  int escape_depth = 0;                               // open escape ops on this thread
  int op_depth = 0;  // open ops on this thread: data flow is recorded for the outermost only
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

uint64_t Identity(const at::Tensor& t) {
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t.unsafeGetTensorImpl()));
}

// Data flow: each tensor argument by its identity (op_links), on the op's call, which is
// open. A list argument's tensors (aten::cat's, aten::index's optional indices) share its
// slot. The reader joins each to the op that last returned the same tensor. The non-tensor
// arguments (ints, floats, bools, int lists: x[:, t]'s aten::select index t) go as one hash,
// under slot kArgsSlot: ops that differ in them are not passes of one layer (TorchLens's
// loops compare them).
constexpr uint32_t kArgsSlot = TOKENTRACE_LINK_ARGS;

uint64_t Mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }  // FNV-1a step

// Entries for g_api.links, sent in batches (two go in one ring event).
class Links {
 public:
  ~Links() { Flush(); }
  void Add(uint32_t slot, uint64_t tensor, uint32_t shape = 0) {
    if (n_ == kBatch) Flush();
    slots_[n_] = slot;
    shapes_[n_] = shape;
    tensors_[n_++] = tensor;
  }
  void Flush() {
    if (n_ > 0) g_api.links(n_, slots_.data(), tensors_.data(), shapes_.data());
    n_ = 0;
  }

 private:
  static constexpr int kBatch = 16;
  std::array<uint32_t, kBatch> slots_{};
  std::array<uint32_t, kBatch> shapes_{};
  std::array<uint64_t, kBatch> tensors_{};
  int n_ = 0;
};

// A hash of a tensor's shape (its sizes, and how many), never 0 (0 says "not known"): ops that
// read tensors of other shapes are not passes of one layer (TorchLens's equivalence class).
uint32_t ShapeHash(const at::Tensor& t) {
  if (t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return 1;
  uint64_t h = tokentrace_shape_hash_begin(static_cast<uint64_t>(t.dim()));
  for (const int64_t size : t.sizes())
    h = tokentrace_shape_hash_step(h, static_cast<uint64_t>(size));
  return tokentrace_shape_hash_end(h);
}

// The bits of a wrapped number (a CPU scalar tensor of a Python int, float or bool), read
// without an op (aten::item would be recorded, inside the observer).
uint64_t WrappedValue(const at::Tensor& t) {
  uint64_t bits = static_cast<uint64_t>(t.scalar_type()) << 56;
  const void* data = t.const_data_ptr();
  if (data == nullptr) return bits;
  switch (t.scalar_type()) {
    case at::kDouble:
    case at::kLong: {
      uint64_t word = 0;
      std::memcpy(&word, data, sizeof(word));
      return bits ^ word;
    }
    case at::kBool:
      return bits ^ static_cast<uint64_t>(*static_cast<const bool*>(data));
    default:
      return bits;
  }
}

void LinkInputs(const at::RecordFunction& fn) {
  const c10::ArrayRef<const c10::IValue> inputs = fn.inputs();
  Links links;
  uint64_t args = 0xcbf29ce484222325ull;
  bool any_args = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const c10::IValue& v = inputs[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) continue;
      if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
        // x + 1's 1, made a tensor for the op by torch's argument parser, not an op: a value,
        // not data flow (its address may be a freed tensor's, which would join it to that
        // tensor's op)
        args = Mix(Mix(args, i), WrappedValue(t));
        any_args = true;
      } else {
        links.Add(static_cast<uint32_t>(i), Identity(t), ShapeHash(t));
      }
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor() && e.toTensor().defined()) {
          links.Add(static_cast<uint32_t>(i), Identity(e.toTensor()), ShapeHash(e.toTensor()));
        } else if (e.isInt()) {
          args = Mix(Mix(args, i), static_cast<uint64_t>(e.toInt()));
          any_args = true;
        }
      }
    } else if (v.isInt() || v.isBool() || v.isDouble()) {
      const uint64_t bits = v.isInt()    ? static_cast<uint64_t>(v.toInt())
                            : v.isBool() ? static_cast<uint64_t>(v.toBool()) + 2
                                         : std::hash<double>{}(v.toDouble());
      args = Mix(Mix(args, i), bits);
      any_args = true;
    }
  }
  if (any_args) links.Add(kArgsSlot, args & 0x7fffffffffffffffull);  // a SQLite INTEGER
}

std::unique_ptr<at::ObserverContext> OnOpStart(const at::RecordFunction& fn) {
  const char* name = fn.name();
  g_api.push(SiteOf(name));
  // Data flow of the outermost ops only: an op's inner ops (aten::linear's aten::t and
  // aten::addmm) are part of it to the reader, and their links would double what is written
  if (t_state.op_depth++ == 0) {
    try {
      LinkInputs(fn);
    } catch (...) {  // an odd argument: the op stays, without its data flow
    }
  }
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
  if (id == 0) {
    std::string path;
    if (index != 0) path.append("[").append(std::to_string(index)).append("]");
    id = g_api.text(path.c_str());
  }
  return id;
}

// Records one output tensor (shape and dtype, and its identity for data flow in `links`, when
// given) under output path `index` on the innermost open call, which is the op's here. False
// for a tensor whose shape cannot be read.
bool RecordTensor(const at::Tensor& t, size_t index, Links* links, uint64_t* first) {
  if (!t.defined() || t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return false;
  if (links != nullptr && index == 0) {
    *first = Identity(t);  // goes with the pop (pop_linked)
  } else if (links != nullptr) {
    links->Add(TOKENTRACE_LINK_OUTPUT | static_cast<uint32_t>(index), Identity(t));
  }
  const auto sizes = t.sizes();
  g_api.output_current(PathId(index), DtypeId(t.scalar_type()), static_cast<int>(sizes.size()),
                       sizes.data());
  return true;
}

// The op's tensor outputs go on its call, each under its path ("" for output 0, "[i]" for
// output i): most ops return one; max/min/median with dim=, topk, sort return two, and a
// split returns a list, whose pieces are recorded as the outputs [0], [1], ... (up to 64).
// The reader (python/tokentrace/_read/op_sites.py) gives each tensor its TorchLens label.
// Returns the identity of output 0 for the outermost op's pop (0: none).
uint64_t RecordTensors(const at::RecordFunction& fn, bool outermost) {
  const std::vector<c10::IValue>& outputs = fn.outputs();
  Links links;  // sent when it goes out of scope, before the op's pop
  Links* flow = outermost ? &links : nullptr;
  uint64_t first = 0;
  for (size_t i = 0; i < outputs.size() && i < t_state.path_ids.size(); ++i) {
    const c10::IValue& v = outputs[i];
    if (v.isTensor()) {
      if (!RecordTensor(v.toTensor(), i, flow, &first)) return first;
    } else if (v.isTensorList() && outputs.size() == 1) {
      const c10::List<at::Tensor> pieces = v.toTensorList();
      for (size_t j = 0; j < pieces.size() && j < t_state.path_ids.size(); ++j) {
        if (!RecordTensor(pieces.get(j), j, flow, &first)) return first;
      }
    }
  }
  return first;
}

void OnOpEnd(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  const bool outermost = t_state.op_depth <= 1;
  if (t_state.op_depth > 0) --t_state.op_depth;
  uint64_t first = 0;
  try {
    first = RecordTensors(fn, outermost);
  } catch (...) {  // an odd tensor: the call stays, without its shape
  }
  if (ctx != nullptr && t_state.escape_depth > 0) --t_state.escape_depth;
  if (first != 0) {
    g_api.pop_linked(first);
  } else {
    g_api.pop();
  }
}

// `api_address`: tokentrace_get_api() of libtokentrace.so, from _native.api_address().
void Start(int64_t api_address, bool host_reads) {
  std::lock_guard<std::mutex> lock(g_mu);
  TORCH_CHECK(!g_handle.has_value(),
              "tokentrace: op records are already on in this process (one trace at a time)");
  TORCH_CHECK(api_address != 0, "tokentrace: op_records_start got no C API table (address 0)");
  const auto* api = reinterpret_cast<const tokentrace_api*>(static_cast<intptr_t>(api_address));
  TORCH_CHECK(api->struct_size >= kApiSizeNeeded && api->api_version == TOKENTRACE_API_VERSION,
              "tokentrace: the native extension and the torch ops library disagree on the C API "
              "(got struct_size ",
              api->struct_size, ", api_version ", api->api_version,
              "; want struct_size >= ", kApiSizeNeeded, ", api_version ", TOKENTRACE_API_VERSION,
              "); rebuild both with scripts/setup.sh");
  TORCH_CHECK(api->site != nullptr && api->push != nullptr && api->pop != nullptr &&
                  api->text != nullptr && api->output_current != nullptr &&
                  api->escape != nullptr && api->links != nullptr && api->pop_linked != nullptr,
              "tokentrace: the C API table has a null entry; rebuild with scripts/setup.sh");
  // Only the entries we need are copied: a longer table's tail may be a layout we do not know.
  std::memcpy(&g_api, api, kApiSizeNeeded);
  g_host_reads = host_reads;
  // ATen ops only (scope FUNCTION): not user record_function ranges, not autograd nodes.
  g_handle = at::addGlobalCallback(at::RecordFunctionCallback(OnOpStart, OnOpEnd)
                                       .needsInputs(true)
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
  m.def("op_records_start(int api_address, bool host_reads) -> ()");
}

TORCH_LIBRARY_IMPL(tokentrace, CompositeExplicitAutograd, m) { m.impl("op_records_start", Start); }

}  // namespace tokentrace::torch_ops
