// InputPaths: the paths of a call's inputs, as python/tokentrace/_record/inputs.py writes them,
// each made once and named by an id. A decoding step's cache has the same layout token after token,
// so after the first step a path is one memo lookup ((parent id, key) -> id), and every row of
// a path shares one Python str. Used by the native input walk (inputs_walk.cc), with the GIL.
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tokentrace_py {

class InputPaths {
 public:
  InputPaths() {
    path_text_.emplace_back();  // id 0: the top, ""
    path_str_.push_back(nanobind::str(""));
  }
  ~InputPaths() {
    for (auto& [key, id] : key_memo_) Py_DECREF(key.second);
  }
  InputPaths(const InputPaths&) = delete;
  InputPaths& operator=(const InputPaths&) = delete;

  size_t size() const { return path_text_.size(); }
  const nanobind::object& Str(uint32_t id) const { return path_str_[id]; }

  // Paths, as _inputs._child makes them: "parent.key" (or "key" at the top) for a str key,
  // "parent[repr(key)]" for any other key.
  uint32_t Key(uint32_t parent, PyObject* key) {
    if (PyUnicode_CheckExact(key)) return Child(parent, key);
    if (PyLong_CheckExact(key)) {
      const long long i = PyLong_AsLongLong(key);
      if (!(i == -1 && PyErr_Occurred())) return Index(parent, i);
      PyErr_Clear();
    }
    nanobind::object repr = nanobind::steal(PyObject_Repr(key));
    const char* text = repr.is_valid() ? PyUnicode_AsUTF8(repr.ptr()) : nullptr;
    if (text == nullptr) PyErr_Clear();
    return Intern(path_text_[parent] + "[" + (text != nullptr ? text : "?") + "]");
  }

  uint32_t Child(uint32_t parent, PyObject* name) {  // name: an exact str
    auto it = key_memo_.find({parent, name});
    if (it != key_memo_.end()) return it->second;
    const char* text = PyUnicode_AsUTF8(name);
    if (text == nullptr) return PyErr_Clear(), Intern(path_text_[parent] + ".?");
    const uint32_t id = Intern(parent == 0 ? std::string(text) : path_text_[parent] + "." + text);
    key_memo_.emplace(std::make_pair(parent, Py_NewRef(name)), id);  // the key is kept alive
    return id;
  }

  uint32_t Index(uint32_t parent, long long i) {
    const uint64_t key = (static_cast<uint64_t>(parent) << 32) ^ static_cast<uint64_t>(i);
    auto it = index_memo_.find(key);
    if (it != index_memo_.end() && it->second.first == i) return it->second.second;
    const uint32_t id = Intern(path_text_[parent] + "[" + std::to_string(i) + "]");
    if (it == index_memo_.end()) index_memo_.emplace(key, std::make_pair(i, id));
    return id;
  }

  // Drops every path (ids are reused after): only while no pending leaf names one.
  void Forget() {
    path_ids_.clear();
    index_memo_.clear();
    for (auto& [key, id] : key_memo_) Py_DECREF(key.second);
    key_memo_.clear();
    path_text_.resize(1);
    path_str_.resize(1);
  }

 private:
  uint32_t Intern(std::string text) {
    auto it = path_ids_.find(text);
    if (it != path_ids_.end()) return it->second;
    const uint32_t id = static_cast<uint32_t>(path_text_.size());
    path_str_.push_back(nanobind::str(text.data(), text.size()));
    path_ids_.emplace(text, id);
    path_text_.push_back(std::move(text));
    return id;
  }

  struct PairHash {
    size_t operator()(const std::pair<uint32_t, PyObject*>& p) const {
      return std::hash<void*>()(p.second) * 31 + p.first;
    }
  };
  std::vector<std::string> path_text_;      // path id -> text
  std::vector<nanobind::object> path_str_;  // path id -> the str every row of that path shares
  std::unordered_map<std::string, uint32_t> path_ids_;
  std::unordered_map<uint64_t, std::pair<long long, uint32_t>> index_memo_;
  std::unordered_map<std::pair<uint32_t, PyObject*>, uint32_t, PairHash> key_memo_;  // keys owned
};

}  // namespace tokentrace_py
