// tokentrace._native: the Python extension over the C API (include/tokentrace/tokentrace.h).
//
// The hook hot path lives here so a hooked module call costs no Python code of ours. Each
// hooked module gets a ForwardWrapper as its instance attribute `forward`: torch then calls
// modules through the fast path of Module.__call__ (no hooks to run) and the wrapper, in C,
// opens the call (an NVTX push in the "tokentrace" domain with the site's registered string,
// its category — root = token, module; the shim numbers the calls), runs the original
// forward, records the output's first tensor (shape, dtype, path inside the container)
// against the shim's current call id, and pops. Modules whose forward cannot be replaced get
// the same calls from a PreHook/PostHook pair. NVTX reaches libtokentrace.so through NVTX
// injection (its constructor sets NVTX_INJECTION64_PATH before any NVTX call), so Nsight
// Systems sees the same ranges when it is the consumer instead.
//
// Threading: every entry point runs with the GIL held (hooks are called from Python), which
// guards the per-site tables. The open-call stack is thread-local. Errors never escape as C++
// exceptions: start/stop turn C API errors into RuntimeError; the hooks never raise, and the
// wrapper passes forward's own exception through after closing the call.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <structmember.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "attribute_swap.h"
#include "inputs_walk.h"
#include "nvtx3/nvToolsExt.h"
// The one header of the native core this extension sees: everything it asks of the recorder
// (kernel modes, the schema, the op observer's entry points) goes through the C API of
// libtokentrace.so (tests/python/test_contracts.py holds it to that).
#include "tokentrace/tokentrace.h"

namespace nb = nanobind;

namespace {

constexpr int kMaxDepth = 4;  // output containers looked into (tests/python/test_first_tensor.py)

struct SiteInfo {
  nvtxStringHandle_t name = nullptr;
  uint32_t category = TOKENTRACE_NVTX_CATEGORY_MODULE;
};

// GIL-guarded state.
std::vector<SiteInfo> g_sites;  // indexed by the shim's site id
PyTypeObject* g_tensor_type = nullptr;
std::unordered_map<PyObject*, uint32_t> g_dtype_ids;  // torch dtypes are singletons
std::unordered_map<std::string, uint32_t> g_path_ids;
thread_local std::vector<uint32_t> t_open;  // sites this thread opened

nvtxDomainHandle_t Domain() {
  static nvtxDomainHandle_t domain = nvtxDomainCreateA(TOKENTRACE_NVTX_DOMAIN);
  return domain;
}

SiteInfo& Site(uint32_t id) {
  if (id >= g_sites.size()) g_sites.resize(id + 1);
  return g_sites[id];
}

// A dict key in an output path as str(key) spells it ("logits", "3"); "?" if that fails.
void AppendKey(PyObject* key, std::string* path) {
  PyObject* str = PyUnicode_Check(key) ? Py_NewRef(key) : PyObject_Str(key);
  const char* utf8 = str != nullptr ? PyUnicode_AsUTF8(str) : nullptr;
  path->append(utf8 != nullptr ? utf8 : "?");
  Py_XDECREF(str);
  if (PyErr_Occurred()) PyErr_Clear();
}

// The first tensor in tuples/lists/dicts (ModelOutput is a dict), depth-first, with its path
// ("", "[0]", "logits", "[0].x"). Opaque objects (caches) are skipped. The recording's one
// search: the shape recorded and the tensor saved (_native.first_tensor) both come from it.
// python/tokentrace/_common/outputs.py keeps the edits' copy in Python (TorchDynamo traces it);
// tests/python/test_first_tensor.py holds both to the same rules.
bool FindTensor(PyObject* v, std::string* path, PyObject** out, int depth) {
  if (g_tensor_type != nullptr && PyObject_TypeCheck(v, g_tensor_type)) {
    *out = v;
    return true;
  }
  if (depth >= kMaxDepth) return false;
  const size_t base = path->size();
  if (PyTuple_Check(v) || PyList_Check(v)) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
    PyObject** items = PySequence_Fast_ITEMS(v);
    for (Py_ssize_t i = 0; i < n; ++i) {
      path->append("[").append(std::to_string(i)).append("]");
      if (FindTensor(items[i], path, out, depth + 1)) return true;
      path->resize(base);
    }
    return false;
  }
  if (PyDict_Check(v)) {
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(v, &pos, &key, &value)) {
      if (base != 0) path->append(".");
      AppendKey(key, path);
      if (FindTensor(value, path, out, depth + 1)) return true;
      path->resize(base);
    }
  }
  return false;
}

// Text ids (tokentrace_text) of dtypes (torch dtypes are singletons: keyed by object) and of
// output paths, so a recorded output costs no string work once its dtype and path were seen.
uint32_t DtypeId(PyObject* dtype) {
  auto it = g_dtype_ids.find(dtype);
  if (it != g_dtype_ids.end()) return it->second;
  PyObject* str = PyObject_Str(dtype);
  if (str == nullptr) return 0;
  const char* utf8 = PyUnicode_AsUTF8(str);
  std::string name = utf8 != nullptr ? utf8 : "?";
  Py_DECREF(str);
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  Py_INCREF(dtype);  // keep the key alive
  const uint32_t id = tokentrace_text(name.c_str());
  g_dtype_ids.emplace(dtype, id);
  return id;
}

uint32_t PathId(const std::string& path) {
  static const uint32_t empty = tokentrace_text("");
  if (path.empty()) return empty;
  auto it = g_path_ids.find(path);
  if (it != g_path_ids.end()) return it->second;
  return g_path_ids.emplace(path, tokentrace_text(path.c_str())).first->second;
}

// Records the output's first tensor against the innermost open call (ours). Never raises.
// Records the first tensor of `output` on the innermost open call; returns its shape hash
// (tokentrace/shape_hash.h), 0 when it has none that can be read.
uint32_t RecordOutput(PyObject* output) {
  static PyObject* const kShape = PyUnicode_InternFromString("shape");
  static PyObject* const kDtype = PyUnicode_InternFromString("dtype");
  std::string path;
  PyObject* tensor = nullptr;
  if (!FindTensor(output, &path, &tensor, 0)) return 0;
  uint32_t hash = 0;
  PyObject* dtype = PyObject_GetAttr(tensor, kDtype);
  PyObject* shape = dtype != nullptr ? PyObject_GetAttr(tensor, kShape) : nullptr;
  if (shape != nullptr && PyTuple_Check(shape)) {  // torch.Size is a tuple
    int64_t dims[10];                              // tokentrace_output_current reads at most 10
    const Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
    uint64_t h = tokentrace_shape_hash_begin(static_cast<uint64_t>(ndim));
    for (Py_ssize_t i = 0; i < ndim; ++i) {
      const int64_t size = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
      if (i < 10) dims[i] = size;
      h = tokentrace_shape_hash_step(h, static_cast<uint64_t>(size));
    }
    if (!PyErr_Occurred()) {
      // Streamed into the trace file by the shim (no per-call state kept here).
      tokentrace_output_current(PathId(path), DtypeId(dtype), static_cast<int>(ndim), dims);
      hash = tokentrace_shape_hash_end(h);
    }
  }
  Py_XDECREF(shape);
  Py_XDECREF(dtype);
  // An odd tensor subclass: the call is still recorded, without its shape.
  if (PyErr_Occurred()) PyErr_Clear();
  return hash;
}

// A tensor's identity as op records keep it, its TensorImpl's address, from
// torch._C._tensor_impl_raw_handle (a capsule; read without TorchFunctionMode dispatch, which
// Tensor._cdata would be); 0 for anything else, or a torch without that function.
uint64_t ImplAddress(PyObject* value) {
  if (value == nullptr || g_tensor_type == nullptr || !PyObject_TypeCheck(value, g_tensor_type)) {
    return 0;
  }
  static PyObject* const handle = [] {
    PyObject* torch_c = PyImport_ImportModule("torch._C");
    PyObject* fn =
        torch_c != nullptr ? PyObject_GetAttrString(torch_c, "_tensor_impl_raw_handle") : nullptr;
    Py_XDECREF(torch_c);
    if (fn == nullptr) PyErr_Clear();
    return fn;  // kept for the life of the process
  }();
  if (handle == nullptr) return 0;
  PyObject* capsule = PyObject_CallOneArg(handle, value);
  if (capsule == nullptr) {
    PyErr_Clear();
    return 0;
  }
  void* address =
      PyCapsule_IsValid(capsule, nullptr) ? PyCapsule_GetPointer(capsule, nullptr) : nullptr;
  Py_DECREF(capsule);
  if (address == nullptr) PyErr_Clear();
  return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(address));
}

// One call of a hooked site: push on entry, output shape and pop on exit. Shared by the
// forward wrapper and the hook pair.
void OpenCall(uint32_t site) {
  SiteInfo& info = g_sites[site];
  nvtxEventAttributes_t attr{};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.category = info.category;
  attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attr.message.registered = info.name;
  nvtxDomainRangePushEx(Domain(), &attr);
  t_open.push_back(site);
}

// Closes the call `site` opened on this thread; false (and nothing done) when the innermost
// open call is not that site's (its open never ran, e.g. an earlier pre-hook raised).
bool CloseCall(uint32_t site, PyObject* output, bool record) {
  if (t_open.empty() || t_open.back() != site) return false;
  if (record && output != nullptr) RecordOutput(output);
  nvtxDomainRangePop(Domain());
  t_open.pop_back();
  return true;
}

void RegisterSite(uint32_t site, const std::string& name, int kind) {
  SiteInfo& info = Site(site);
  if (info.name == nullptr) info.name = nvtxDomainRegisterStringA(Domain(), name.c_str());
  info.category = kind == TOKENTRACE_SITE_ROOT ? TOKENTRACE_NVTX_CATEGORY_ROOT
                                               : TOKENTRACE_NVTX_CATEGORY_MODULE;
}

// The pair for modules the wrapper does not suit (they already run hooks that must fall
// inside the call, their forward cannot be replaced, or they sit under nn.DataParallel; see
// python/tokentrace/_record/hooks.py): a forward pre-hook and a forward hook (registered with
// always_call=True). torch runs hooked modules through its slow call path.
class PreHook {
 public:
  PreHook(uint32_t site, const std::string& name, int kind) : site_(site) {
    RegisterSite(site, name, kind);
  }
  void Call(nb::handle, nb::handle) { OpenCall(site_); }

 private:
  uint32_t site_;
};

class PostHook {
 public:
  PostHook(uint32_t site, bool record) : site_(site), record_(record) {}
  void Call(nb::handle, nb::handle, nb::handle output) { CloseCall(site_, output.ptr(), record_); }

 private:
  uint32_t site_;
  bool record_;
};

// ForwardWrapper: installed as a module's instance attribute `forward`, so torch's
// Module.__call__ keeps its fast path (no hooks) and calls us with the arguments as they came
// (vectorcall, no tuple or dict built). We open the call, run the original bound forward,
// record the output (and hand it to `on_output` for saved sites), and close the call, also
// when forward raises. Attributes we do not have (__func__, __self__, __name__, __code__...)
// are the original forward's, and __wrapped__ is the original, so inspect.signature (which
// transformers uses on model.forward) sees the real signature.
struct ForwardWrapper {
  PyObject_HEAD vectorcallfunc vectorcall;
  PyObject* forward;    // the original (bound) forward; owned
  PyObject* on_output;  // callable(output) for saved sites, or nullptr; owned
  PyObject* on_input;   // callable(*args, **kwargs) for sites whose inputs are recorded; owned
  uint32_t site;
  int record;
  int enabled;  // 0: a plain pass-through (removed while someone wrapped over us)
  uint64_t output_errors;
  uint64_t input_errors;
};

PyObject* WrapperVectorcall(PyObject* self, PyObject* const* args, size_t nargsf,
                            PyObject* kwnames) {
  auto* w = reinterpret_cast<ForwardWrapper*>(self);
  if (!w->enabled) return PyObject_Vectorcall(w->forward, args, nargsf, kwnames);
  OpenCall(w->site);
  if (w->on_input != nullptr) {
    // Inside the call (the recorder reads its id), before forward runs and changes anything
    // (a cache appends). The arguments are passed on as they came: no tuple or dict built.
    PyObject* r = PyObject_Vectorcall(w->on_input, args, nargsf, kwnames);
    if (r == nullptr) {  // never break the traced job over a record of its inputs
      PyErr_Clear();
      ++w->input_errors;
    }
    Py_XDECREF(r);
  }
  PyObject* out = PyObject_Vectorcall(w->forward, args, nargsf, kwnames);
  if (out != nullptr && w->on_output != nullptr) {
    PyObject* r = PyObject_CallOneArg(w->on_output, out);
    if (r == nullptr) {  // never break the traced job over a saved copy
      PyErr_Clear();
      ++w->output_errors;
    }
    Py_XDECREF(r);
  }
  if (out == nullptr) {
    // Keep forward's exception while the call closes.
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    CloseCall(w->site, nullptr, false);
    PyErr_Restore(type, value, tb);
  } else {
    CloseCall(w->site, out, w->record != 0);
  }
  return out;
}

int WrapperTraverse(PyObject* self, visitproc visit, void* arg) {
  auto* w = reinterpret_cast<ForwardWrapper*>(self);
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(w->forward);
  Py_VISIT(w->on_output);
  Py_VISIT(w->on_input);
  return 0;
}

int WrapperClear(PyObject* self) {
  auto* w = reinterpret_cast<ForwardWrapper*>(self);
  Py_CLEAR(w->forward);
  Py_CLEAR(w->on_output);
  Py_CLEAR(w->on_input);
  return 0;
}

void WrapperDealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  WrapperClear(self);
  PyObject_GC_Del(self);
  Py_DECREF(type);  // instances of heap types hold their type
}

PyObject* WrapperGetattro(PyObject* self, PyObject* name) {
  PyObject* v = PyObject_GenericGetAttr(self, name);
  if (v != nullptr || !PyErr_ExceptionMatches(PyExc_AttributeError)) return v;
  auto* w = reinterpret_cast<ForwardWrapper*>(self);
  if (w->forward == nullptr) return nullptr;
  PyErr_Clear();
  return PyObject_GetAttr(w->forward, name);
}

PyObject* WrapperRepr(PyObject* self) {
  auto* w = reinterpret_cast<ForwardWrapper*>(self);
  return PyUnicode_FromFormat("<tokentrace forward of site %u wrapping %R>", w->site,
                              w->forward != nullptr ? w->forward : Py_None);
}

// Pickling and copy.deepcopy of a module while it is traced (torch.save(model), a checkpoint
// callback) see the wrapper in the module's __dict__: it reduces to the original forward
// (through the identity function the hooks hand over, set_forward_identity: pickled by its own
// module path), so the copy gets a plain, untraced forward instead of the job failing on an
// unpicklable object. The extension names no module of the package.
PyObject* g_forward_identity = nullptr;  // owned; set once by the hooks

PyObject* WrapperReduce(PyObject* self, PyObject*) {
  auto* w = reinterpret_cast<ForwardWrapper*>(self);
  if (g_forward_identity == nullptr) {
    PyErr_SetString(PyExc_TypeError,
                    "tokentrace: a forward wrapper pickles only once the hooks "
                    "set its identity (set_forward_identity)");
    return nullptr;
  }
  return Py_BuildValue("(O(O))", g_forward_identity, w->forward != nullptr ? w->forward : Py_None);
}

PyMethodDef g_wrapper_methods[] = {
    {"__reduce__", WrapperReduce, METH_NOARGS, "pickles as the original forward"},
    {nullptr, nullptr, 0, nullptr}};

PyMemberDef g_wrapper_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(ForwardWrapper, forward), READONLY, "the original forward"},
    {"site", T_UINT, offsetof(ForwardWrapper, site), READONLY, "the shim's site id"},
    {"enabled", T_INT, offsetof(ForwardWrapper, enabled), 0, "0: pass calls straight through"},
    {"output_errors", T_ULONGLONG, offsetof(ForwardWrapper, output_errors), READONLY,
     "outputs on_output failed on"},
    {"input_errors", T_ULONGLONG, offsetof(ForwardWrapper, input_errors), READONLY,
     "calls on_input failed on"},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(ForwardWrapper, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

PyType_Slot g_wrapper_slots[] = {{Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
                                 {Py_tp_dealloc, reinterpret_cast<void*>(WrapperDealloc)},
                                 {Py_tp_traverse, reinterpret_cast<void*>(WrapperTraverse)},
                                 {Py_tp_clear, reinterpret_cast<void*>(WrapperClear)},
                                 {Py_tp_getattro, reinterpret_cast<void*>(WrapperGetattro)},
                                 {Py_tp_repr, reinterpret_cast<void*>(WrapperRepr)},
                                 {Py_tp_methods, g_wrapper_methods},
                                 {Py_tp_members, g_wrapper_members},
                                 {0, nullptr}};

PyType_Spec g_wrapper_spec = {"tokentrace._native.ForwardWrapper", sizeof(ForwardWrapper), 0,
                              Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
                              g_wrapper_slots};

PyTypeObject* g_wrapper_type = nullptr;  // made from g_wrapper_spec at import

nb::object MakeWrapper(uint32_t site, const std::string& name, int kind, nb::handle forward,
                       bool record, nb::handle on_output, nb::handle on_input) {
  if (!PyCallable_Check(forward.ptr())) throw nb::type_error("forward must be callable");
  RegisterSite(site, name, kind);
  auto* w = PyObject_GC_New(ForwardWrapper, g_wrapper_type);
  if (w == nullptr) throw nb::python_error();
  w->vectorcall = WrapperVectorcall;
  w->forward = Py_NewRef(forward.ptr());
  w->on_output = on_output.is_none() ? nullptr : Py_NewRef(on_output.ptr());
  w->on_input = on_input.is_none() ? nullptr : Py_NewRef(on_input.ptr());
  w->site = site;
  w->record = record ? 1 : 0;
  w->enabled = 1;
  w->output_errors = 0;
  w->input_errors = 0;
  PyObject_GC_Track(w);
  return nb::steal(reinterpret_cast<PyObject*>(w));
}

void Start(std::optional<std::string> out_path, std::optional<std::string> kernels,
           std::optional<std::string> token_range) {
  tokentrace_options options{};
  options.struct_size = sizeof(options);
  options.api_version = TOKENTRACE_API_VERSION;
  options.out_path = out_path ? out_path->c_str() : nullptr;
  options.kernels = kernels ? kernels->c_str() : nullptr;
  options.token_range = token_range ? token_range->c_str() : nullptr;
  char err[1024] = {0};
  int rc;
  {
    nb::gil_scoped_release release;
    rc = tokentrace_start(&options, err, sizeof(err));
  }
  if (rc != 0) throw std::runtime_error(err[0] ? err : "tokentrace: start failed");
}

void Stop() {
  char err[1024] = {0};
  int rc;
  {
    nb::gil_scoped_release release;
    rc = tokentrace_stop(err, sizeof(err));
  }
  if (rc != 0) throw std::runtime_error(err[0] ? err : "tokentrace: stop failed");
}

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "tokentrace native hooks over libtokentrace.so (see python/src/native.cc)";
  // A preloaded job keeps our hooks on its modules to the end of the process; the modules
  // (and so our hook objects) may still be alive when nanobind checks at interpreter exit.
  // Its "leaked instances" lines would land on the job's stderr for objects that are not
  // leaks: the job's own modules hold them.
  nb::set_leak_warnings(false);
  m.attr("API_VERSION") = TOKENTRACE_API_VERSION;
  m.attr("__version__") = TOKENTRACE_VERSION;  // pyproject.toml's, through CMake
  m.attr("OPS_BUFFER_EVENTS") = TOKENTRACE_OPS_BUFFER_EVENTS;
  m.attr("MAX_CALL_NUMBER") = TOKENTRACE_MAX_CALL_NUMBER;
  m.attr("META_CLOSED") = TOKENTRACE_META_CLOSED;
  // The trace schema (src/store/schema.sql, embedded at build time): Python creates test
  // files from it and reads tokens with the same SELECT as the C++ readers.
  m.attr("SCHEMA_SQL") = tokentrace_schema_sql();
  m.attr("TOKENS_SELECT_SQL") = tokentrace_tokens_select_sql();
  // Files without the writer's summaries (meta key META_SUMMARIES) are read with this one.
  m.attr("TOKENS_SCAN_SQL") = tokentrace_tokens_scan_sql();
  m.attr("META_SUMMARIES") = tokentrace_meta_summaries();
  m.attr("SCHEMA_VERSION") = tokentrace_schema_version();
  m.attr("LINK_ARGS") = TOKENTRACE_LINK_ARGS;  // op_links' slot of the non-tensor arguments' hash
  m.attr("OLDEST_READABLE_SCHEMA") = tokentrace_oldest_readable_schema();
  // Whether a writer holds the trace file open (its shared flock): the C++ store's own test.
  m.def(
      "being_written",
      [](const std::string& path) { return tokentrace_file_being_written(path.c_str()) != 0; },
      nb::arg("path"));
  // Site, escape and loss kinds (include/tokentrace/kinds.h) as {name: code}.
  nb::dict site_kinds, escape_kinds, loss_kinds;
#define TT_KIND_ITEM_(dict) [&](const char* text, int value) { dict[text] = value; }
#define TT_SITE_(name, value, text) TT_KIND_ITEM_(site_kinds)(text, value);
#define TT_ESCAPE_(name, value, text) TT_KIND_ITEM_(escape_kinds)(text, value);
#define TT_LOSS_(name, value, text) TT_KIND_ITEM_(loss_kinds)(text, value);
  TOKENTRACE_SITE_KINDS(TT_SITE_)
  TOKENTRACE_ESCAPE_KINDS(TT_ESCAPE_)
  TOKENTRACE_LOSS_KINDS(TT_LOSS_)
#undef TT_SITE_
#undef TT_ESCAPE_
#undef TT_LOSS_
#undef TT_KIND_ITEM_
  m.attr("SITE_KINDS") = site_kinds;
  m.attr("ESCAPE_KINDS") = escape_kinds;
  m.attr("LOSS_KINDS") = loss_kinds;
  // The tables the Python layer fills (kinds.h TOKENTRACE_ROW_TABLES) as {table: code}, and
  // their rows, meta and loss counts handed to the session's writer, which writes them with
  // the calls (tokentrace_add_rows, _add_meta, _add_loss). RuntimeError when no session
  // records; ValueError for a table, column or loss kind the writer does not know.
  nb::dict row_tables;
#define TT_TABLE_(name, value, text, loss) row_tables[text] = value;
  TOKENTRACE_ROW_TABLES(TT_TABLE_)
#undef TT_TABLE_
  m.attr("ROW_TABLES") = row_tables;
  // Every meta key a trace may hold (kinds.h TOKENTRACE_META_KEYS), in the list's order.
  nb::list meta_keys;
#define TT_META_(name, text) meta_keys.append(text);
  TOKENTRACE_META_KEYS(TT_META_)
#undef TT_META_
  m.attr("META_KEYS") = nb::tuple(meta_keys);
  m.def(
      "add_rows",
      [](int table, const std::vector<std::string>& columns, nb::iterable rows) {
        std::vector<tokentrace_value> values;
        std::vector<std::string> texts;                  // the rows' text, alive for the call
        std::vector<std::pair<size_t, size_t>> text_at;  // (value, text) indices
        size_t nrows = 0;
        for (nb::handle row : rows) {
          size_t width = 0;
          for (nb::handle v : nb::iter(row)) {
            tokentrace_value out{TOKENTRACE_VALUE_NULL, 0, 0.0, nullptr};
            if (v.is_none()) {
            } else if (PyBool_Check(v.ptr()) || PyLong_Check(v.ptr())) {
              out.type = TOKENTRACE_VALUE_INT;
              out.i = nb::cast<int64_t>(v);
            } else if (PyFloat_Check(v.ptr())) {
              out.type = TOKENTRACE_VALUE_REAL;
              out.d = PyFloat_AS_DOUBLE(v.ptr());
            } else {
              out.type = TOKENTRACE_VALUE_TEXT;
              text_at.emplace_back(values.size(), texts.size());
              texts.push_back(nb::cast<std::string>(nb::str(v)));
            }
            values.push_back(out);
            ++width;
          }
          if (width != columns.size()) {
            throw nb::value_error(("tokentrace: a row of " + std::to_string(width) +
                                   " values for " + std::to_string(columns.size()) + " columns")
                                      .c_str());
          }
          ++nrows;
        }
        for (const auto& [value, text] : text_at) values[value].s = texts[text].c_str();
        std::vector<const char*> names;
        for (const std::string& c : columns) names.push_back(c.c_str());
        if (tokentrace_active() == 0) {
          throw std::runtime_error(
              "tokentrace: no session is recording, so its writer cannot "
              "take these rows");
        }
        char err[1024] = {0};
        int rc;
        {
          nb::gil_scoped_release release;
          rc = tokentrace_add_rows(table, static_cast<int>(names.size()), names.data(), nrows,
                                   values.data(), err, sizeof err);
        }
        if (rc != 0) throw nb::value_error(err);
      },
      nb::arg("table"), nb::arg("columns"), nb::arg("rows"));
  m.def(
      "add_meta",
      [](const std::string& key, const std::string& value) {
        char err[1024] = {0};
        if (tokentrace_add_meta(key.c_str(), value.c_str(), err, sizeof err) != 0) {
          if (tokentrace_active() == 0) throw std::runtime_error(err);
          throw nb::value_error(err);
        }
      },
      nb::arg("key"), nb::arg("value"));
  m.def(
      "add_loss",
      [](int kind, int64_t count) {
        char err[1024] = {0};
        if (tokentrace_add_loss(kind, count, err, sizeof err) != 0) {
          if (tokentrace_active() == 0) throw std::runtime_error(err);
          throw nb::value_error(err);
        }
      },
      nb::arg("kind"), nb::arg("count"));
  // Kernel modes: the C++ parser (src/core/config.cc, behind the C API) judges them for Python.
  m.attr("DEFAULT_KERNEL_MODE") = tokentrace_default_kernel_mode();
  m.attr("KERNEL_MODES_ACCEPTED") = tokentrace_kernel_modes_accepted();
  m.def(
      "parse_kernel_mode",
      [](const std::string& text, const std::string& what) {
        char mode[32] = {0};
        char err[1024] = {0};
        if (tokentrace_parse_kernel_mode(text.c_str(), what.c_str(), mode, sizeof(mode), err,
                                         sizeof(err)) != 0) {
          throw nb::value_error(err[0] ? err : "tokentrace: not a kernel mode");
        }
        return std::string(mode);
      },
      nb::arg("text"), nb::arg("what") = "kernels");
  m.def("start", &Start, nb::arg("out_path").none(), nb::arg("kernels").none(),
        nb::arg("token_range").none());
  m.def("stop", &Stop);
  m.def("flush", [] {
    nb::gil_scoped_release release;
    return tokentrace_flush() == 0;
  });
  m.def("active", [] { return tokentrace_active() != 0; });
  m.def("out_path", [] { return std::string(tokentrace_out_path()); });
  m.def("kernels_status", [] { return std::string(tokentrace_kernels_status()); });
  m.def("site",
        [](const std::string& name, int kind) { return tokentrace_site(name.c_str(), kind); });
  m.def("push", [](uint32_t site) { tokentrace_push(site); });
  m.def("pop", [] { tokentrace_pop(); });
  // Records `output`'s first tensor against the innermost open call, then closes it: a call
  // opened by push that has an output (python/tokentrace/_common/op_groups.py). `read`, when
  // given, is the tensor the call read and returned as it is (x.contiguous() of a contiguous
  // x, x[i] = v's x): with op records its data flow is said here, by identity (read as
  // argument 0, returned as output 0), as no ATen op of the call says it.
  m.def(
      "pop_output",
      [](nb::handle output, nb::handle read) {
        const uint32_t shape = RecordOutput(output.ptr());
        const uint64_t same = ImplAddress(read.ptr());
        if (same == 0) {
          tokentrace_pop();
          return;
        }
        const uint32_t slot = 0;  // read as argument 0, with its shape (the output's: it)
        tokentrace_links(1, &slot, &same, &shape);
        tokentrace_pop_linked(same);
      },
      nb::arg("output").none(), nb::arg("read").none() = nb::none());
  // Op data flow (tokentrace_link) of a Python call kept as an op (op_groups.py): a tensor
  // it read (output 0) or returned (output 1), given by torch._C._tensor_impl_raw_handle(t)
  // (a capsule of its TensorImpl's address, read without TorchFunctionMode dispatch, which
  // Tensor._cdata is not). Anything else: nothing.
  m.def("link", [](int output, uint32_t slot, nb::handle handle) {
    if (!PyCapsule_CheckExact(handle.ptr())) return;
    void* address = PyCapsule_GetPointer(handle.ptr(), nullptr);
    if (address == nullptr) {
      PyErr_Clear();
      return;
    }
    const uint32_t entry = (output != 0 ? TOKENTRACE_LINK_OUTPUT : 0u) | slot;
    const uint64_t tensor = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(address));
    tokentrace_links(1, &entry, &tensor, nullptr);
  });
  m.def("current", [] {
    uint64_t call_id = 0;
    uint32_t token = 0;
    tokentrace_current(&call_id, &token);
    return std::make_tuple(call_id, token);
  });
  m.def(
      "escape", [](int kind) { tokentrace_escape(kind); },
      nb::arg("kind") = static_cast<int>(TOKENTRACE_ESCAPE_HOST_READ));
  m.def("first_tensor", [](nb::handle value) {
    std::string path;
    PyObject* tensor = nullptr;
    if (!FindTensor(value.ptr(), &path, &tensor, 0)) return nb::make_tuple(nb::none(), nb::none());
    return nb::make_tuple(nb::borrow(tensor), path);
  });
  m.def("set_forward_identity", [](nb::handle fn) {
    if (!PyCallable_Check(fn.ptr())) throw nb::type_error("set_forward_identity takes a function");
    Py_INCREF(fn.ptr());
    Py_XSETREF(g_forward_identity, fn.ptr());
  });
  m.def("set_tensor_type", [](nb::handle type) {
    if (!PyType_Check(type.ptr())) throw nb::type_error("set_tensor_type takes torch.Tensor");
    Py_INCREF(type.ptr());
    g_tensor_type = reinterpret_cast<PyTypeObject*>(type.ptr());
  });
  // The address of libtokentrace.so's versioned entry table (tokentrace_get_api), for the op
  // observer of the torch ops library (cuda/torch/op_observer.cc checks its struct_size and
  // api_version): that library does not link libtokentrace.so, and ours is not in the global
  // symbol scope.
  m.def("api_address",
        [] { return static_cast<int64_t>(reinterpret_cast<intptr_t>(tokentrace_get_api())); });
  g_wrapper_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_wrapper_spec));
  if (g_wrapper_type == nullptr) throw nb::python_error();
  m.def("wrap_forward", &MakeWrapper, nb::arg("site"), nb::arg("name"), nb::arg("kind"),
        nb::arg("forward"), nb::arg("record"), nb::arg("on_output").none(),
        nb::arg("on_input").none() = nb::none());
  tokentrace_py::RegisterInputsWalk(m);     // InputBuffer: python/src/inputs_walk.cc
  tokentrace_py::RegisterAttributeSwap(m);  // python/src/attribute_swap.cc
  nb::class_<PreHook>(m, "PreHook")
      .def(nb::init<uint32_t, const std::string&, int>())
      .def("__call__", &PreHook::Call, nb::arg("module"), nb::arg("args").none());
  nb::class_<PostHook>(m, "PostHook")
      .def(nb::init<uint32_t, bool>())
      .def("__call__", &PostHook::Call, nb::arg("module"), nb::arg("args").none(),
           nb::arg("output").none());
}
