// AttributeSwap: a fixed list of (a module's __dict__, the attribute, our wrapper, what the
// wrapper replaced or `missing`). hide() puts back what each wrapper replaced (deleting the
// attribute where there was none) wherever our wrapper is still the attribute, and show()
// puts the wrappers back where hide() took them. It runs around every compiled call of a
// traced model (TorchDynamo must not see the wrappers: each would break its graph), so it is
// plain dict operations in C: about 20 ns a module, where the same loop in Python cost
// ~260 ns (bench/compiled_call_cost.py).
//
// Nesting: a hide() inside a hidden stretch (a compiled call inside another) does nothing,
// and its show() only ends it; the outermost show() puts the wrappers back. The GIL guards it
// all (called from Python). Errors (a dict that refuses a key) are Python exceptions.
#include "attribute_swap.h"

#include <cstddef>
#include <vector>

namespace nb = nanobind;

namespace tokentrace_py {
namespace {

class AttributeSwap {
 public:
  AttributeSwap(const nb::list& entries, nb::handle missing) : missing_(nb::borrow(missing)) {
    entries_.reserve(nb::len(entries));
    for (nb::handle item : entries) {
      nb::tuple t = nb::cast<nb::tuple>(item);
      if (t.size() != 4 || !PyDict_Check(t[0].ptr())) {
        throw nb::type_error("AttributeSwap takes (dict, key, wrapper, previous) tuples");
      }
      entries_.push_back(
          Entry{nb::borrow(t[0]), nb::borrow(t[1]), nb::borrow(t[2]), nb::borrow(t[3]), false});
    }
  }

  // How many wrappers were taken off (0 inside a hidden stretch).
  size_t Hide() {
    if (depth_++ > 0) return 0;
    size_t hidden = 0;
    for (Entry& e : entries_) {
      PyObject* now = PyDict_GetItemWithError(e.dict.ptr(), e.key.ptr());  // borrowed
      if (now == nullptr && PyErr_Occurred()) throw nb::python_error();
      e.hidden = now == e.wrapper.ptr();
      if (!e.hidden) continue;
      const int rc = e.previous.is(missing_)
                         ? PyDict_DelItem(e.dict.ptr(), e.key.ptr())
                         : PyDict_SetItem(e.dict.ptr(), e.key.ptr(), e.previous.ptr());
      if (rc != 0) throw nb::python_error();
      ++hidden;
    }
    return hidden;
  }

  void Show() {
    if (depth_ == 0) return;
    if (--depth_ > 0) return;
    for (Entry& e : entries_) {
      if (!e.hidden) continue;
      e.hidden = false;
      PyObject* now = PyDict_GetItemWithError(e.dict.ptr(), e.key.ptr());
      if (now == nullptr && PyErr_Occurred()) throw nb::python_error();
      if (now == e.wrapper.ptr()) continue;
      if (PyDict_SetItem(e.dict.ptr(), e.key.ptr(), e.wrapper.ptr()) != 0) {
        throw nb::python_error();
      }
    }
  }

  size_t Size() const { return entries_.size(); }

 private:
  struct Entry {
    nb::object dict, key, wrapper, previous;
    bool hidden;
  };
  std::vector<Entry> entries_;
  nb::object missing_;
  int depth_ = 0;
};

}  // namespace

void RegisterAttributeSwap(nb::module_& m) {
  nb::class_<AttributeSwap>(m, "AttributeSwap")
      .def(nb::init<const nb::list&, nb::handle>(), nb::arg("entries"), nb::arg("missing"))
      .def("hide", &AttributeSwap::Hide)
      .def("show", &AttributeSwap::Show)
      .def("__len__", &AttributeSwap::Size);
}

}  // namespace tokentrace_py
