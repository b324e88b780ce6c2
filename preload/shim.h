// Process-wide control of the one active session (preload constructor, exit hooks, fork,
// the C API). Control paths only: these take a mutex.
#pragma once

#include <string>

#include "core/config.h"
#include "session/meta_rows.h"

namespace tokentrace::shim {

bool StartSession(const Config& config, bool preload, std::string* error);
bool StopSession(std::string* error, const MetaRowList& extra_meta = {});
bool FlushSession(std::string* error);
bool SessionActive();
std::string OutPath();
std::string KernelsStatus();

}  // namespace tokentrace::shim
