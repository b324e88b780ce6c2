// hide_attributes / show_attributes (python/src/attribute_swap.cc): take the trace's forward
// wrappers off their modules and put them back, for a compiled call of the model
// (python/tokentrace/_compiled/call.py, HookSet.hide). Registered on tokentrace._native by
// native.cc.
#pragma once

#include <nanobind/nanobind.h>

namespace tokentrace_py {

// Adds hide_attributes and show_attributes to `m`.
void RegisterAttributeSwap(nanobind::module_& m);

}  // namespace tokentrace_py
