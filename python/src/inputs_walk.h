// The native walk of a call's inputs (python/src/inputs_walk.cc): registered on the
// tokentrace._native module by native.cc with one call.
#pragma once

#include <nanobind/nanobind.h>

namespace tokentrace_py {

// Adds InputBuffer (and the walker type its walker() method makes) to `m`.
void RegisterInputsWalk(nanobind::module_& m);

}  // namespace tokentrace_py
