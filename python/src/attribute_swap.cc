// hide_attributes / show_attributes: around every compiled call of a traced model
// (python/tokentrace/_compiled/call.py, HookSet.hide) the trace's forward wrappers come off
// their modules and go back on. TorchDynamo must not see them: each would break its graph.
// An entry is (a module's __dict__, the attribute, our wrapper, what the wrapper replaced or
// `missing`). hide_attributes puts back what each wrapper replaced (deleting the attribute
// where there was none) wherever our wrapper is still the attribute, and returns the entries
// it changed; show_attributes puts those wrappers back. Plain dict operations in C: with the
// call around them, ~100 ns a module, where the same loop in Python cost ~450 ns
// (bench/compiled_call_cost.py, bench/results/2026-12-02-compiled-cpu-vm.md).
//
// Module functions, not a class: the plan is a Python list the caller keeps, and nothing of
// ours outlives a trace to be reported as a leak at interpreter exit. The GIL guards it all
// (called from Python); a dict that refuses a key is a Python exception.
#include "attribute_swap.h"

namespace nb = nanobind;

namespace tokentrace_py {
namespace {

struct Entry {
  PyObject* dict;  // borrowed from the entry tuple, which the caller's list keeps
  PyObject* key;
  PyObject* wrapper;
  PyObject* previous;
};

Entry Unpack(nb::handle item) {
  PyObject* t = item.ptr();
  if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 4 || !PyDict_Check(PyTuple_GET_ITEM(t, 0))) {
    throw nb::type_error("hide_attributes takes (dict, key, wrapper, previous) tuples");
  }
  return Entry{PyTuple_GET_ITEM(t, 0), PyTuple_GET_ITEM(t, 1), PyTuple_GET_ITEM(t, 2),
               PyTuple_GET_ITEM(t, 3)};
}

nb::list HideAttributes(const nb::list& entries, nb::handle missing) {
  nb::list hidden;
  for (nb::handle item : entries) {
    const Entry e = Unpack(item);
    PyObject* now = PyDict_GetItemWithError(e.dict, e.key);  // borrowed
    if (now == nullptr && PyErr_Occurred()) throw nb::python_error();
    if (now != e.wrapper) continue;
    const int rc = e.previous == missing.ptr() ? PyDict_DelItem(e.dict, e.key)
                                               : PyDict_SetItem(e.dict, e.key, e.previous);
    if (rc != 0) throw nb::python_error();
    hidden.append(item);
  }
  return hidden;
}

void ShowAttributes(const nb::list& hidden) {
  for (nb::handle item : hidden) {
    const Entry e = Unpack(item);
    PyObject* now = PyDict_GetItemWithError(e.dict, e.key);
    if (now == nullptr && PyErr_Occurred()) throw nb::python_error();
    if (now != e.wrapper && PyDict_SetItem(e.dict, e.key, e.wrapper) != 0) {
      throw nb::python_error();
    }
  }
}

}  // namespace

void RegisterAttributeSwap(nb::module_& m) {
  m.def("hide_attributes", &HideAttributes, nb::arg("entries"), nb::arg("missing"));
  m.def("show_attributes", &ShowAttributes, nb::arg("hidden"));
}

}  // namespace tokentrace_py
