// InputBuffer: the root call's inputs (and other recorded sites' that are not saved), walked in
// C at every call. python/tokentrace/_common/values.py is the reference: its _walk decides the same
// leaves and paths, and its describe() makes the row of every leaf that is not a tensor, so
// both produce identical rows (tests/python/test_inputs_native.py compares them).
//
// Why: a decoding step's root call is given a cache of 2 x layers tensors, and the Python walk
// cost ~100 µs per token for 32 layers. Here a call costs the tensor metadata reads and no
// Python object per leaf: a leaf is a fixed-size record (call id, path id, dtype and device
// ids, dims in a side array). Paths are interned once ((parent path, key) -> id), so a cache
// whose layout is the same token after token makes no strings. Rows (Python tuples, texts) are
// made when the recorder drains the buffer, off the call path.
//
// What is kept until the drain is only what cannot change: ints, dtype and device objects,
// exact bool/int/float/str/None values (immutable; described at the drain). Any other leaf
// (an opaque object, a sequence too long to walk) is described at call time, so no tensor and
// no container is kept alive or read late.
//
// Threading: every entry point runs with the GIL held (hooks are called from Python).
#include "inputs_walk.h"

#include <Python.h>
#include <structmember.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "input_paths.h"
#include "tokentrace/tokentrace.h"

namespace nb = nanobind;

namespace tokentrace_py {
namespace {

// A leaf's form: a tensor's metadata, a value described at the drain, or a row made at call time.
enum Form : uint8_t { kTensor, kDeferred, kRow };

struct Leaf {
  uint64_t call_id;
  uint32_t path;
  Form form;
  uint8_t ndim;
  uint16_t type;     // kTensor: index into tensor_types_
  uint16_t dtype;    // kTensor: index into dtypes_
  uint16_t device;   // kTensor: index into devices_
  uint32_t dims;     // kTensor: offset of its ndim sizes in dims_
  PyObject* object;  // kDeferred: the value; kRow: the row (path, kind, ...); owned
};

// The getters of torch.Tensor's shape/dtype/device (getset descriptors of torch._C.TensorBase),
// called directly for the plain tensor types: no attribute lookup per read.
struct Getters {
  PyTypeObject* type;
  getter get[3];
  void* closure[3];
};

class InputBuffer {
 public:
  // kinds: the _inputs kind codes (tensor, leaf, seq, dict, cache, dataclass, object,
  // container); python: (kind_of, describe, text, fields_of, children_of), the reference's
  // functions (children_of: a registered container's children, tt.register_container); flush: a
  // weak method (None, or the recorder's flush once it exists) called when flush_rows are pending;
  // flush_rows 0: each call's rows go to the session's writer as the call is recorded (Hand).
  InputBuffer(nb::object current, nb::tuple kinds, nb::tuple python, nb::tuple plain_tensors,
              int max_depth, size_t max_items, nb::object flush, size_t flush_rows,
              uintptr_t tensor_meta)
      : meta_(reinterpret_cast<TensorMeta>(tensor_meta)),
        current_(std::move(current)),
        flush_(std::move(flush)),
        flush_rows_(flush_rows),
        max_depth_(max_depth),
        max_items_(max_items) {
    for (size_t i = 0; i < kKinds; ++i) kind_codes_[i] = nb::cast<int>(kinds[i]);
    kind_of_ = python[0], describe_ = python[1], text_ = python[2], fields_of_ = python[3];
    children_of_ = python[4];
    const char* names[3] = {"shape", "dtype", "device"};
    for (nb::handle t : plain_tensors) {
      Getters g{reinterpret_cast<PyTypeObject*>(t.ptr()), {}, {}};
      bool ok = PyType_Check(t.ptr());
      for (int i = 0; ok && i < 3; ++i) {
        PyObject* d = _PyType_Lookup(g.type, nb::str(names[i]).ptr());
        ok = d != nullptr && Py_IS_TYPE(d, &PyGetSetDescr_Type);
        if (ok) {
          g.get[i] = reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset->get;
          g.closure[i] = reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset->closure;
        }
      }
      if (ok) getters_.push_back(g);
    }
  }

  ~InputBuffer() {
    Release(0);
    for (auto& [type, kind] : kinds_) Py_DECREF(type);
  }

  size_t pending() const { return leaves_.size(); }

  // One call: its arguments as the forward wrapper got them (vectorcall). Returns false with
  // a Python error set, and keeps no leaf of the call, where the walk failed.
  bool Record(PyObject* names, PyObject* const* args, size_t nargs, PyObject* kwnames) {
    const size_t mark = leaves_.size(), dims_mark = dims_.size();
    bool ok = false;
    try {
      ok = WalkCall(names, args, nargs, kwnames);
    } catch (nb::python_error& e) {
      e.restore();
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
    if (!ok) {
      Release(mark);
      dims_.resize(dims_mark);
      return false;
    }
    if (flush_rows_ == 0) return Hand();  // each call's rows to the writer, as it ends
    if (leaves_.size() >= flush_rows_ && !flush_.is_none()) {
      PyObject* method = PyObject_CallNoArgs(flush_.ptr());  // the weak method's target
      if (method == nullptr) return false;
      PyObject* r = method == Py_None ? Py_NewRef(Py_None) : PyObject_CallNoArgs(method);
      Py_DECREF(method);
      if (r == nullptr) return false;
      Py_DECREF(r);
    }
    return true;
  }

  // The pending leaves handed to the session's writer as call_inputs rows
  // (tokentrace_add_rows): the same rows Drain makes, the texts read from the Python strings
  // the buffer keeps, so the writer commits them with the calls they belong to. Returns false
  // with a Python error set when the writer refused them (no session records); the buffer is
  // empty after either way.
  bool Hand() {
    static const char* const kColumns[] = {"call_id", "path",   "kind",  "type", "shape",
                                           "dtype",   "device", "value", "file", "key"};
    constexpr int kWidth = 10;
    const size_t n = leaves_.size();
    if (n == 0) return true;
    std::vector<tokentrace_value> values(n * kWidth,
                                         tokentrace_value{TOKENTRACE_VALUE_NULL, 0, 0.0, nullptr});
    std::vector<std::string> shapes;  // reserved: their c_str() stay put
    shapes.reserve(n);
    std::vector<nb::object> held;  // described rows, alive for the call
    auto text = [](tokentrace_value* v, PyObject* o) {
      if (o == nullptr || o == Py_None) return true;
      if (PyLong_Check(o)) {
        v->type = TOKENTRACE_VALUE_INT;
        v->i = PyLong_AsLongLong(o);
        return !PyErr_Occurred();
      }
      if (!PyUnicode_Check(o)) return false;
      v->s = PyUnicode_AsUTF8(o);
      v->type = TOKENTRACE_VALUE_TEXT;
      return v->s != nullptr;
    };
    auto shape_json = [&shapes](const int64_t* dims, Py_ssize_t ndim) {
      std::string json = "[";
      for (Py_ssize_t d = 0; d < ndim; ++d) {
        if (d) json += ", ";
        json += std::to_string(dims[d]);
      }
      shapes.push_back(json + "]");
      return shapes.back().c_str();
    };
    bool ok = true;
    for (size_t i = 0; ok && i < n; ++i) {
      const Leaf& leaf = leaves_[i];
      tokentrace_value* row = &values[i * kWidth];
      row[0].type = TOKENTRACE_VALUE_INT;
      row[0].i = static_cast<int64_t>(leaf.call_id);
      if (leaf.form == kTensor) {
        ok = text(&row[1], paths_.Str(leaf.path).ptr());
        row[2].type = TOKENTRACE_VALUE_TEXT;
        row[2].s = "tensor";
        ok = ok && text(&row[3], Text(&tensor_types_[leaf.type], true).ptr());
        row[4].type = TOKENTRACE_VALUE_TEXT;
        row[4].s = shape_json(&dims_[leaf.dims], leaf.ndim);
        ok = ok && text(&row[5], Text(&dtypes_[leaf.dtype], false).ptr()) &&
             text(&row[6], Text(&devices_[leaf.device], false).ptr());
        continue;
      }
      nb::object described = leaf.form == kRow
                                 ? nb::borrow(leaf.object)
                                 : describe_(paths_.Str(leaf.path), nb::handle(leaf.object));
      // (path, kind, type, shape, dtype, device, value): columns 1 to 7
      if (!PyTuple_Check(described.ptr()) || PyTuple_GET_SIZE(described.ptr()) != 7) {
        PyErr_SetString(PyExc_RuntimeError, "tokentrace: an input row is not 7 items");
        ok = false;
        break;
      }
      for (Py_ssize_t c = 0; ok && c < 7; ++c) {
        PyObject* item = PyTuple_GET_ITEM(described.ptr(), c);
        if (c == 3 && item != Py_None) {  // a shape: its JSON text
          std::vector<int64_t> dims;
          nb::object seq = nb::borrow(item);
          for (nb::handle d : seq) dims.push_back(nb::cast<int64_t>(d));
          row[4].type = TOKENTRACE_VALUE_TEXT;
          row[4].s = shape_json(dims.data(), static_cast<Py_ssize_t>(dims.size()));
          continue;
        }
        ok = text(&row[c + 1], item);
      }
      held.push_back(std::move(described));
    }
    if (ok) {
      char err[512] = {0};
      if (tokentrace_add_rows(TOKENTRACE_ROWS_CALL_INPUTS, kWidth, kColumns, n, values.data(), err,
                              sizeof err) != 0) {
        PyErr_SetString(PyExc_RuntimeError, err);
        ok = false;
      }
    } else if (!PyErr_Occurred()) {
      PyErr_SetString(PyExc_RuntimeError,
                      "tokentrace: an input row holds a value of no column type");
    }
    Release(0);
    dims_.clear();
    if (paths_.size() > kMaxPaths) paths_.Forget();
    return ok;
  }

  // The pending leaves as the recorder's rows: (call_id, path, kind, type, shape, dtype,
  // device, value, None), in call and argument order; the buffer is empty after.
  nb::list Drain() {
    nb::list rows;
    for (const Leaf& leaf : leaves_) {
      nb::object id = nb::int_(leaf.call_id);
      if (leaf.form == kTensor) {
        nb::tuple shape = nb::steal<nb::tuple>(PyTuple_New(leaf.ndim));
        for (int d = 0; d < leaf.ndim; ++d) {
          PyTuple_SET_ITEM(shape.ptr(), d, PyLong_FromLongLong(dims_[leaf.dims + d]));
        }
        rows.append(nb::make_tuple(id, paths_.Str(leaf.path), "tensor",
                                   Text(&tensor_types_[leaf.type], true), shape,
                                   Text(&dtypes_[leaf.dtype], false),
                                   Text(&devices_[leaf.device], false), nb::none(), nb::none()));
        continue;
      }
      nb::object row = leaf.form == kRow
                           ? nb::borrow(leaf.object)
                           : describe_(paths_.Str(leaf.path), nb::handle(leaf.object));
      const Py_ssize_t n = PyTuple_Size(row.ptr());
      if (n < 0) throw nb::python_error();
      nb::object full = nb::steal(PyTuple_New(n + 2));
      PyTuple_SET_ITEM(full.ptr(), 0, id.release().ptr());
      for (Py_ssize_t i = 0; i < n; ++i) {
        PyTuple_SET_ITEM(full.ptr(), i + 1, Py_NewRef(PyTuple_GET_ITEM(row.ptr(), i)));
      }
      PyTuple_SET_ITEM(full.ptr(), n + 1, Py_NewRef(Py_None));
      rows.append(full);
    }
    Release(0);
    dims_.clear();
    if (paths_.size() > kMaxPaths) paths_.Forget();  // nothing pending names them now
    return rows;
  }

 private:
  static constexpr size_t kMaxPaths = 1 << 16;  // as _inputs._MAX_PATHS: a fresh memo past it

  // An object kept with its text, made at the first drain that needs it.
  struct Named {
    nb::object object;
    nb::object text;
  };

  bool WalkCall(PyObject* names, PyObject* const* args, size_t nargs, PyObject* kwnames) {
    uint64_t call_id = 0;
    if (current_.is_none()) {
      uint32_t token = 0;
      tokentrace_current(&call_id, &token);
    } else {
      call_id = nb::cast<uint64_t>(current_()[0]);
    }
    if (call_id == 0) return true;
    call_id_ = call_id;
    const Py_ssize_t nnames = PyTuple_GET_SIZE(names);
    for (size_t i = 0; i < nargs; ++i) {
      const uint32_t path = static_cast<Py_ssize_t>(i) < nnames
                                ? paths_.Child(0, PyTuple_GET_ITEM(names, i))
                                : paths_.Index(0, static_cast<long long>(i));
      if (!Walk(args[i], path, 0)) return false;
    }
    const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; ++i) {
      if (!Walk(args[nargs + i], paths_.Child(0, PyTuple_GET_ITEM(kwnames, i)), 0)) return false;
    }
    return true;
  }

  int Kind(PyObject* value) {
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(value));
    for (size_t i = 0; i < kFewTypes && i < recent_.size(); ++i) {  // most calls: a few types
      if (recent_[i].first == type) return recent_[i].second;
    }
    auto it = kinds_.find(type);
    if (it != kinds_.end()) return it->second;
    nb::object kind = kind_of_(nb::handle(type));
    const int code = nb::cast<int>(kind);
    kinds_.emplace(Py_NewRef(type), code);
    if (recent_.size() < kFewTypes) recent_.emplace_back(type, code);  // kinds_ holds it
    return code;
  }
  bool Is(int kind, int which) const { return kind == kind_codes_[which]; }
  enum {
    kTensorKind,
    kLeafKind,
    kSeqKind,
    kDictKind,
    kCacheKind,
    kDataclassKind,
    kObjectKind,
    kContainerKind,
    kKinds
  };

  bool Walk(PyObject* value, uint32_t path, int depth) {
    const int kind = Kind(value);
    if (Is(kind, kTensorKind)) return AddTensor(value, path);
    bool leaf = Is(kind, kLeafKind) || Is(kind, kObjectKind) || depth >= max_depth_;
    if (!leaf && (Is(kind, kSeqKind) || Is(kind, kDictKind))) {
      const Py_ssize_t n = PyObject_Length(value);
      if (n < 0) return false;
      leaf = static_cast<size_t>(n) > max_items_;
    }
    if (leaf) return AddLeaf(value, path);
    if (Is(kind, kSeqKind) || Is(kind, kContainerKind)) {
      // a registered container: its children as its flatten gives them, by index
      nb::object items = Is(kind, kSeqKind) ? nb::borrow(value) : children_of_(nb::handle(value));
      nb::object seq = nb::steal(PySequence_Fast(items.ptr(), "a sequence"));
      if (!seq.is_valid()) return false;
      const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
      for (Py_ssize_t i = 0; i < n; ++i) {
        nb::object item = nb::borrow(PySequence_Fast_GET_ITEM(seq.ptr(), i));
        if (!Walk(item.ptr(), paths_.Index(path, i), depth + 1)) return false;
      }
      return true;
    }
    if (Is(kind, kDictKind)) {
      return Items(value, [&](PyObject* key, PyObject* item) {
        return Walk(item, paths_.Key(path, key), depth + 1);
      });
    }
    if (Is(kind, kCacheKind)) {  // as _walk: tensors, caches and sequences holding state
      PyObject** dict = _PyObject_GetDictPtr(value);  // vars(value), no attribute lookup
      nb::object attrs = dict != nullptr && *dict != nullptr
                             ? nb::borrow(*dict)
                             : nb::steal(PyObject_GetAttrString(value, "__dict__"));
      if (!attrs.is_valid()) return false;
      return Items(attrs.ptr(), [&](PyObject* key, PyObject* item) {
        const int item_kind = Kind(item);
        if (Is(item_kind, kTensorKind)) return AddTensor(item, paths_.Key(path, key));
        if (Is(item_kind, kCacheKind) || (Is(item_kind, kSeqKind) && HoldsState(item))) {
          return Walk(item, paths_.Key(path, key), depth + 1);
        }
        return !PyErr_Occurred();
      });
    }
    nb::object fields = FieldsOf(value);  // a dataclass
    for (nb::handle name : fields) {
      PyObject* item = PyObject_GetAttr(value, name.ptr());
      if (item == nullptr) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return false;
        PyErr_Clear();
        item = Py_NewRef(Py_None);
      }
      nb::object held = nb::steal(item);
      if (!Walk(item, paths_.Child(path, name.ptr()), depth + 1)) return false;
    }
    return true;
  }

  // Calls fn(key, value) for a mapping's items in its own order (dicts directly; a subclass,
  // e.g. ModelOutput, through its items()).
  template <typename Fn>
  bool Items(PyObject* mapping, Fn fn) {
    if (PyDict_CheckExact(mapping)) {
      Py_ssize_t pos = 0;
      PyObject *key, *item;
      while (PyDict_Next(mapping, &pos, &key, &item)) {
        nb::object k = nb::borrow(key), v = nb::borrow(item);  // a walk may run Python
        if (!fn(key, item)) return false;
      }
      return true;
    }
    nb::object items = nb::steal(PyObject_CallMethod(mapping, "items", nullptr));
    if (!items.is_valid()) return false;
    nb::object seq = nb::steal(PySequence_Fast(items.ptr(), "items()"));
    if (!seq.is_valid()) return false;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq.ptr()); ++i) {
      PyObject* kv = PySequence_Fast_GET_ITEM(seq.ptr(), i);
      if (!fn(PyTuple_GET_ITEM(kv, 0), PyTuple_GET_ITEM(kv, 1))) return false;
    }
    return true;
  }

  bool HoldsState(PyObject* seq_like) {
    nb::object seq = nb::steal(PySequence_Fast(seq_like, "a sequence"));
    if (!seq.is_valid()) return PyErr_Clear(), false;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq.ptr()); ++i) {
      const int kind = Kind(PySequence_Fast_GET_ITEM(seq.ptr(), i));
      if (Is(kind, kCacheKind) || Is(kind, kTensorKind)) return true;
    }
    return false;
  }

  nb::object FieldsOf(PyObject* value) {
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(value));
    auto it = fields_.find(type);
    if (it != fields_.end()) return it->second;
    nb::object names = fields_of_(nb::handle(type));
    fields_.emplace(type, names);  // kinds_ holds the type
    return names;
  }

  bool AddTensor(PyObject* t, uint32_t path) {
    const Getters* g = nullptr;
    for (const Getters& c : getters_) g = Py_TYPE(t) == c.type ? &c : g;
    auto read = [&](int i, const char* name) {
      return nb::steal(g != nullptr ? g->get[i](t, g->closure[i])
                                    : PyObject_GetAttrString(t, name));
    };
    if (g != nullptr && meta_ != nullptr) {  // a plain tensor: its C++ tensor's metadata
      int64_t sizes[kMaxDims];
      int32_t dtype = 0, device = 0;
      const int ndim = meta_(t, sizes, kMaxDims, &dtype, &device);
      if (ndim >= 0) {
        Leaf leaf{call_id_, path, kTensor, static_cast<uint8_t>(ndim),
                  0,        0,    0,       static_cast<uint32_t>(dims_.size()),
                  nullptr};
        auto first = [&](std::vector<Named>* table, int i, const char* name) {
          nb::object object = read(i, name);
          return object.is_valid() ? Intern(table, object.ptr()) : uint16_t{0};
        };
        const int dtype_id =
            ByCode(&dtype_codes_, dtype, [&] { return first(&dtypes_, 1, "dtype"); });
        const int device_id =
            ByCode(&device_codes_, device, [&] { return first(&devices_, 2, "device"); });
        if (dtype_id < 0 || device_id < 0) return false;
        leaf.type = Intern(&tensor_types_, reinterpret_cast<PyObject*>(Py_TYPE(t)));
        leaf.dtype = static_cast<uint16_t>(dtype_id);
        leaf.device = static_cast<uint16_t>(device_id);
        dims_.insert(dims_.end(), sizes, sizes + ndim);
        leaves_.push_back(leaf);
        return true;
      }
    }
    nb::object shape = read(0, "shape");
    if (!shape.is_valid()) return false;
    nb::object dtype = read(1, "dtype");
    if (!dtype.is_valid()) return false;
    nb::object device = read(2, "device");
    if (!device.is_valid()) return false;
    Leaf leaf{call_id_, path, kTensor, 0, 0, 0, 0, static_cast<uint32_t>(dims_.size()), nullptr};
    const Py_ssize_t ndim = PyTuple_Check(shape.ptr()) ? PyTuple_GET_SIZE(shape.ptr()) : -1;
    for (Py_ssize_t d = 0; d >= 0 && d < ndim && ndim <= 255; ++d) {
      const long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), d));
      if (size == -1 && PyErr_Occurred()) break;  // not an int (a symbolic size)
      dims_.push_back(size);
    }
    if (dims_.size() - leaf.dims != static_cast<size_t>(ndim)) {  // the reference says it
      PyErr_Clear();
      dims_.resize(leaf.dims);
      return AddRow(t, path);
    }
    leaf.ndim = static_cast<uint8_t>(ndim);
    leaf.type = Intern(&tensor_types_, reinterpret_cast<PyObject*>(Py_TYPE(t)));
    leaf.dtype = Intern(&dtypes_, dtype.ptr());
    leaf.device = Intern(&devices_, device.ptr());
    leaves_.push_back(leaf);
    return true;
  }

  bool AddLeaf(PyObject* value, uint32_t path) {
    if (value == Py_None || PyBool_Check(value) || PyLong_CheckExact(value) ||
        PyFloat_CheckExact(value) || PyUnicode_CheckExact(value)) {  // immutable: later is fine
      leaves_.push_back(Leaf{call_id_, path, kDeferred, 0, 0, 0, 0, 0, Py_NewRef(value)});
      return true;
    }
    return AddRow(value, path);
  }

  bool AddRow(PyObject* value, uint32_t path) {  // described now: nothing of it is kept
    PyObject* row =
        PyObject_CallFunctionObjArgs(describe_.ptr(), paths_.Str(path).ptr(), value, nullptr);
    if (row == nullptr) return false;
    leaves_.push_back(Leaf{call_id_, path, kRow, 0, 0, 0, 0, 0, row});
    return true;
  }

  // The table index a dtype's or device's code (from meta_) stands for; the first tensor with
  // a new code pays one read of the Python attribute (make), -1 where that read failed.
  template <typename Make>
  static int ByCode(std::unordered_map<int32_t, uint16_t>* codes, int32_t code, Make make) {
    auto it = codes->find(code);
    if (it != codes->end()) return it->second;
    if (PyErr_Occurred()) return -1;
    const uint16_t id = make();
    if (PyErr_Occurred()) return -1;
    codes->emplace(code, id);
    return id;
  }

  // The index of `object` in `table` (identity, then equality: torch makes a new device
  // object at every read; dtypes are singletons). Tables hold a few entries.
  static uint16_t Intern(std::vector<Named>* table, PyObject* object) {
    for (size_t i = 0; i < table->size(); ++i) {
      if ((*table)[i].object.ptr() == object) return static_cast<uint16_t>(i);
    }
    for (size_t i = 0; i < table->size(); ++i) {
      if (PyObject_RichCompareBool((*table)[i].object.ptr(), object, Py_EQ) == 1) {
        return static_cast<uint16_t>(i);
      }
      PyErr_Clear();
    }
    table->push_back(Named{nb::borrow(object), nb::object()});
    return static_cast<uint16_t>(table->size() - 1);
  }

  // A tensor type's __name__, a dtype's or device's text (_inputs._text), made once.
  nb::object Text(Named* named, bool type_name) {
    if (!named->text.is_valid()) {
      named->text = type_name ? named->object.attr("__name__") : text_(named->object);
    }
    return named->text;
  }

  void Release(size_t mark) {  // drops leaves from mark on, with what they hold
    for (size_t i = mark; i < leaves_.size(); ++i) Py_XDECREF(leaves_[i].object);
    leaves_.resize(mark);
  }

  // tokentrace_tensor_meta (cuda/torch/tensor_meta.cc), or nullptr without that library.
  using TensorMeta = int (*)(PyObject*, int64_t*, int, int32_t*, int32_t*);
  static constexpr int kMaxDims = 64;
  TensorMeta meta_;
  std::unordered_map<int32_t, uint16_t> dtype_codes_, device_codes_;
  nb::object current_, flush_, kind_of_, describe_, text_, fields_of_, children_of_;
  size_t flush_rows_;
  int max_depth_;
  size_t max_items_;
  int kind_codes_[kKinds] = {};
  uint64_t call_id_ = 0;
  std::vector<Getters> getters_;
  std::vector<Leaf> leaves_;
  std::vector<int64_t> dims_;
  std::vector<Named> tensor_types_, dtypes_, devices_;
  static constexpr size_t kFewTypes = 16;
  std::vector<std::pair<PyObject*, int>> recent_;  // the first kFewTypes of kinds_
  std::unordered_map<PyObject*, int> kinds_;       // types, owned
  std::unordered_map<PyObject*, nb::object> fields_;
  InputPaths paths_;
};

// Python objects over InputBuffer, plain CPython types (not nanobind classes: a recorder alive at
// interpreter exit is not a leak to report). The walker is what a site's forward wrapper calls
// with the call's arguments (vectorcall: no tuple or dict built).
struct BufferObject {
  PyObject_HEAD InputBuffer* buffer;  // owned
};

struct Walker {
  PyObject_HEAD vectorcallfunc vectorcall;
  PyObject* buffer;  // a BufferObject; owned
  PyObject* names;   // tuple: forward's positional parameter names; owned
};

PyTypeObject* g_buffer_type = nullptr;
PyTypeObject* g_walker_type = nullptr;

PyObject* WalkerCall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* w = reinterpret_cast<Walker*>(self);
  nb::object hold = nb::borrow(w->buffer);  // a flush inside may drop the recorder
  InputBuffer* buffer = reinterpret_cast<BufferObject*>(w->buffer)->buffer;
  if (!buffer->Record(w->names, args, PyVectorcall_NARGS(nargsf), kwnames)) return nullptr;
  Py_RETURN_NONE;
}

template <typename T>
void Dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  if constexpr (std::is_same_v<T, Walker>) {
    Py_XDECREF(reinterpret_cast<Walker*>(self)->buffer);
    Py_XDECREF(reinterpret_cast<Walker*>(self)->names);
  } else {
    delete reinterpret_cast<BufferObject*>(self)->buffer;
  }
  PyObject_Free(self);
  Py_DECREF(type);  // instances of heap types hold their type
}

PyObject* BufferDrain(PyObject* self, PyObject*) {
  try {
    return reinterpret_cast<BufferObject*>(self)->buffer->Drain().release().ptr();
  } catch (nb::python_error& e) {
    e.restore();
    return nullptr;
  }
}

PyObject* BufferWalker(PyObject* self, PyObject* names) {
  if (!PyTuple_Check(names)) {
    PyErr_SetString(PyExc_TypeError, "walker(names): names is a tuple of parameter names");
    return nullptr;
  }
  auto* w = PyObject_New(Walker, g_walker_type);
  if (w == nullptr) return nullptr;
  w->vectorcall = WalkerCall;
  w->buffer = Py_NewRef(self);
  w->names = Py_NewRef(names);
  return reinterpret_cast<PyObject*>(w);
}

Py_ssize_t BufferLength(PyObject* self) {
  return static_cast<Py_ssize_t>(reinterpret_cast<BufferObject*>(self)->buffer->pending());
}

PyMethodDef g_buffer_methods[] = {
    {"drain", BufferDrain, METH_NOARGS, "the pending rows, in call order; empties the buffer"},
    {"walker", BufferWalker, METH_O, "the callable(*args, **kwargs) recording one site's calls"},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot g_buffer_slots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(Dealloc<BufferObject>)},
                                {Py_tp_methods, g_buffer_methods},
                                {Py_mp_length, reinterpret_cast<void*>(BufferLength)},
                                {0, nullptr}};

PyType_Spec g_buffer_spec = {"tokentrace._native.InputBuffer", sizeof(BufferObject), 0,
                             Py_TPFLAGS_DEFAULT, g_buffer_slots};

PyMemberDef g_walker_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Walker, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

PyType_Slot g_walker_slots[] = {{Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
                                {Py_tp_dealloc, reinterpret_cast<void*>(Dealloc<Walker>)},
                                {Py_tp_members, g_walker_members},
                                {0, nullptr}};

PyType_Spec g_walker_spec = {"tokentrace._native.InputWalker", sizeof(Walker), 0,
                             Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, g_walker_slots};

}  // namespace

void RegisterInputsWalk(nb::module_& m) {
  g_buffer_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_buffer_spec));
  g_walker_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&g_walker_spec));
  if (g_buffer_type == nullptr || g_walker_type == nullptr) throw nb::python_error();
  m.def(
      "InputBuffer",
      [](nb::object current, nb::tuple kinds, nb::tuple python, nb::tuple plain_tensors,
         int max_depth, size_t max_items, nb::object flush, size_t flush_rows,
         uintptr_t tensor_meta) {
        auto* buffer = new InputBuffer(current, kinds, python, plain_tensors, max_depth, max_items,
                                       flush, flush_rows, tensor_meta);
        auto* o = PyObject_New(BufferObject, g_buffer_type);
        if (o == nullptr) {
          delete buffer;
          throw nb::python_error();
        }
        o->buffer = buffer;
        return nb::steal(reinterpret_cast<PyObject*>(o));
      },
      nb::arg("current").none(), nb::arg("kinds"), nb::arg("python"), nb::arg("plain_tensors"),
      nb::arg("max_depth"), nb::arg("max_items"), nb::arg("flush").none(), nb::arg("flush_rows"),
      nb::arg("tensor_meta") = 0);
}

}  // namespace tokentrace_py
