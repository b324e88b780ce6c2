// Claiming the output file of a session: which path a process writes, decided under a lock
// on the file's directory so that concurrent processes of one run agree.
//
// The first process of a run (TOKENTRACE_RUN_ID, see preload/shim.cc) to create the file
// keeps its name. Another process of the same run that resolves to the same path (the job
// started more processes than the name tells apart, e.g. --out without %p) writes
// "<path>.<pid>" instead and says so, rather than replacing a file being written or already
// written in this run. A file from an earlier run is replaced, as before. When the lock or the
// existing file's meta cannot be had, the existing file is left alone.
#pragma once

#include <memory>
#include <string>

#include "store/store.h"

namespace tokentrace {

// The output directory must exist and be writable; checked before the job starts work.
bool CheckWritable(const std::string& path, std::string* error);

struct FileClaim {
  std::unique_ptr<Store> store;  // null when the file could not be created (*error says why)
  std::string path;              // the file written: the path asked for, or "<path>.<pid>"
  std::string notice;            // one line for stderr when the path changed ("" otherwise)
};

// Creates the trace file for process `pid` of run `run_id` (empty: no run, the path is
// simply opened). The claim (meta run_id) is written before the directory lock is released,
// so the next process sees it. The caller keeps fork() out while this runs: a flock belongs
// to the open file, which a child would share and keep locked.
FileClaim ClaimOutputFile(const std::string& path, const std::string& run_id, long pid,
                          std::string* error);

}  // namespace tokentrace
