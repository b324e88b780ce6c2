#include "session/file_claim.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

#include "core/config.h"
#include "store/reader.h"

namespace tokentrace {

bool CheckWritable(const std::string& path, std::string* error) {
  const std::string what = OutPathNotAFile(path);
  if (!what.empty()) {
    *error = "tokentrace: cannot write '" + path + "': it is " + what +
             ", not a file (accepted: a regular file path; set TOKENTRACE_OUT or --out)";
    return false;
  }
  const std::string dir = DirOf(path);
  if (access(dir.c_str(), W_OK) != 0) {
    *error = "tokentrace: cannot write '" + path + "': directory '" + dir +
             "' does not exist or is not writable (set TOKENTRACE_OUT or --out to a writable path)";
    return false;
  }
  return true;
}

FileClaim ClaimOutputFile(const std::string& path, const std::string& run_id, long pid,
                          std::string* error) {
  FileClaim claim;
  claim.path = path;
  if (run_id.empty()) {
    claim.store = Store::Open(path, error);
    return claim;
  }
  // The directory's lock is held by this descriptor until it is closed, on every way out: an
  // allocation failure below throws (the drain counts it and retries later), and a descriptor
  // left open would keep the lock, so the retry's flock on a new descriptor would wait forever.
  struct DirLock {
    int fd;
    ~DirLock() {
      if (fd >= 0) close(fd);  // releases the lock
    }
  } dir{open(DirOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  int locked = -1;
  if (dir.fd >= 0) {
    while ((locked = flock(dir.fd, LOCK_EX)) != 0 && errno == EINTR) {
    }
  }
  std::string owner;
  const bool known = ReadMetaValue(path, "run_id", &owner);
  const bool exists = access(path.c_str(), F_OK) == 0;
  const bool in_use = exists && Store::BeingWritten(path);  // by another run, still alive
  if (exists && (owner == run_id || !known || locked != 0 || in_use)) {
    claim.path = path + "." + std::to_string(pid);
    claim.notice = "tokentrace: '" + path + "' " +
                   (owner == run_id ? "belongs to another process of this run"
                    : in_use        ? "is being written by another run"
                    : !known        ? "is not a tokentrace trace (or cannot be read), so it is kept"
                             : "could not be locked to check for another writer, so it is kept") +
                   "; this one (pid " + std::to_string(pid) + ") writes '" + claim.path +
                   "' (put %p in --out/TOKENTRACE_OUT for one file per process)";
  }
  claim.store = Store::Open(claim.path, error);
  if (claim.store) {
    Batch mine;  // written before the lock is released: the next process sees the claim
    mine.meta = {{"run_id", run_id}};
    if (!claim.store->Write(mine, error)) claim.store.reset();
  }
  return claim;  // the lock goes with `dir`, after the claim is written
}

}  // namespace tokentrace
