// AttributeSwap (python/src/attribute_swap.cc): takes the trace's forward wrappers off their
// modules and puts them back, for a compiled call of the model (python/tokentrace/
// _compiled_call.py, HookSet.hide). Registered on tokentrace._native by native.cc.
#pragma once

#include <nanobind/nanobind.h>

namespace tokentrace_py {

// Adds AttributeSwap to `m`.
void RegisterAttributeSwap(nanobind::module_& m);

}  // namespace tokentrace_py
