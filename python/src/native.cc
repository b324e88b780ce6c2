// tokentrace._native: the Python extension over the C API (include/tokentrace/tokentrace.h).
//
// The hook hot path lives here so a hooked module call costs one C++ call per side instead of
// Python code: PreHook pushes an NVTX range in the "tokentrace" domain with the site's
// registered string, its category (root = token, module) and the call number k as payload;
// PostHook records the output's first tensor (shape, dtype, path inside the container) against
// the shim's current call id, then pops. NVTX reaches libtokentrace.so through NVTX injection
// (its constructor sets NVTX_INJECTION64_PATH before any NVTX call), so Nsight Systems sees the
// same ranges when it is the consumer instead.
//
// Threading: every entry point runs with the GIL held (hooks are called from Python), which
// guards the per-site tables and the pending outputs. The open-call stack is thread-local.
// Errors never escape as C++ exceptions: start/stop turn C API errors into RuntimeError, the
// hooks never raise.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "nvtx3/nvToolsExt.h"
#include "tokentrace/tokentrace.h"

namespace nb = nanobind;

namespace {

constexpr int kMaxDepth = 4;  // same as python/tokentrace/_outputs.py

struct SiteInfo {
  nvtxStringHandle_t name = nullptr;
  uint32_t category = TOKENTRACE_NVTX_CATEGORY_MODULE;
  uint64_t calls = 0;  // k of the latest call (payload); reset at start()
};

// GIL-guarded state.
std::vector<SiteInfo> g_sites;  // indexed by the shim's site id
PyTypeObject* g_tensor_type = nullptr;
std::unordered_map<PyObject*, std::string> g_dtype_names;  // torch dtypes are singletons
thread_local std::vector<uint32_t> t_open;                 // sites this thread opened

nvtxDomainHandle_t Domain() {
  static nvtxDomainHandle_t domain = nvtxDomainCreateA(TOKENTRACE_NVTX_DOMAIN);
  return domain;
}

SiteInfo& Site(uint32_t id) {
  if (id >= g_sites.size()) g_sites.resize(id + 1);
  return g_sites[id];
}

// The first tensor in tuples/lists/dicts (ModelOutput is a dict), depth-first, with its path
// ("", "[0]", "logits", "[0].x"). Opaque objects (caches) are skipped.
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
      if (PyUnicode_Check(key)) {
        const char* s = PyUnicode_AsUTF8(key);
        path->append(s != nullptr ? s : "?");
      } else {
        path->append("?");
      }
      if (FindTensor(value, path, out, depth + 1)) return true;
      path->resize(base);
    }
  }
  return false;
}

const std::string& DtypeName(PyObject* dtype) {
  auto it = g_dtype_names.find(dtype);
  if (it != g_dtype_names.end()) return it->second;
  std::string name = nb::cast<std::string>(nb::str(nb::handle(dtype)));
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  Py_INCREF(dtype);  // keep the key alive
  return g_dtype_names.emplace(dtype, std::move(name)).first->second;
}

void RecordOutput(PyObject* output) {
  std::string path;
  PyObject* tensor = nullptr;
  if (!FindTensor(output, &path, &tensor, 0)) return;
  uint64_t call_id = 0;
  uint32_t k = 0, token = 0;
  tokentrace_current(&call_id, &k, &token);
  if (call_id == 0) return;
  try {
    nb::handle t(tensor);
    const std::string& dtype = DtypeName(t.attr("dtype").ptr());
    int64_t dims[8];
    int ndim = 0;
    nb::object shape = t.attr("shape");
    for (nb::handle d : shape) {
      if (ndim < 8) dims[ndim] = nb::cast<int64_t>(d);
      ++ndim;
    }
    // Streamed into the trace file by the shim (no per-call state kept here).
    tokentrace_output(call_id, path.c_str(), dtype.c_str(), ndim, dims);
  } catch (...) {
    PyErr_Clear();  // an odd tensor subclass: the call is still recorded, without its shape
  }
}

class PreHook {
 public:
  PreHook(uint32_t site, const std::string& name, int kind) : site_(site) {
    SiteInfo& info = Site(site);
    if (info.name == nullptr) info.name = nvtxDomainRegisterStringA(Domain(), name.c_str());
    info.category = kind == TOKENTRACE_SITE_ROOT ? TOKENTRACE_NVTX_CATEGORY_ROOT
                                                 : TOKENTRACE_NVTX_CATEGORY_MODULE;
  }

  void Call(nb::handle, nb::handle) {
    SiteInfo& info = g_sites[site_];
    nvtxEventAttributes_t attr{};
    attr.version = NVTX_VERSION;
    attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attr.category = info.category;
    attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    attr.message.registered = info.name;
    attr.payloadType = NVTX_PAYLOAD_TYPE_UNSIGNED_INT64;
    attr.payload.ullValue = ++info.calls;
    nvtxDomainRangePushEx(Domain(), &attr);
    t_open.push_back(site_);
  }

 private:
  uint32_t site_;
};

class PostHook {
 public:
  PostHook(uint32_t site, bool record) : site_(site), record_(record) {}

  void Call(nb::handle, nb::handle, nb::handle output) {
    // Close only what our own pre-hook opened (an earlier pre-hook may have raised).
    if (t_open.empty() || t_open.back() != site_) return;
    if (record_ && output.ptr() != nullptr) RecordOutput(output.ptr());
    nvtxDomainRangePop(Domain());
    t_open.pop_back();
  }

 private:
  uint32_t site_;
  bool record_;
};

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
  for (SiteInfo& s : g_sites) s.calls = 0;
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
  m.attr("API_VERSION") = TOKENTRACE_API_VERSION;
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
  m.def("site", [](const std::string& name, int kind) { return tokentrace_site(name.c_str(), kind); });
  m.def("push", [](uint32_t site) { tokentrace_push(site); });
  m.def("pop", [] { tokentrace_pop(); });
  m.def("current", [] {
    uint64_t call_id = 0;
    uint32_t k = 0, token = 0;
    tokentrace_current(&call_id, &k, &token);
    return std::make_tuple(call_id, k, token);
  });
  m.def("escape", [](int kind) { tokentrace_escape(kind); }, nb::arg("kind") = 4);
  m.def("set_tensor_type", [](nb::handle type) {
    if (!PyType_Check(type.ptr())) throw nb::type_error("set_tensor_type takes torch.Tensor");
    Py_INCREF(type.ptr());
    g_tensor_type = reinterpret_cast<PyTypeObject*>(type.ptr());
  });
  m.def("open_depth", [] { return t_open.size(); });
  nb::class_<PreHook>(m, "PreHook")
      .def(nb::init<uint32_t, const std::string&, int>())
      .def("__call__", &PreHook::Call, nb::arg("module"), nb::arg("args").none());
  nb::class_<PostHook>(m, "PostHook")
      .def(nb::init<uint32_t, bool>())
      .def("__call__", &PostHook::Call, nb::arg("module"), nb::arg("args").none(),
           nb::arg("output").none());
}
