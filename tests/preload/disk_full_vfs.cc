// A full disk for tests, without root or a small mount: preloaded (or linked) next to
// libtokentrace, it registers a SQLite VFS that wraps the default one and becomes the default.
// Like a real full disk, a write that only overwrites bytes a file already has succeeds; a
// write that grows a file fails with SQLITE_FULL once the files have grown by more than
// TT_DISK_FULL_AFTER bytes in all. After TT_DISK_FULL_REFUSALS refused writes (unset: never)
// space "returns" and every write succeeds again.
// A test linked with it (tests/session/drainer_test.cc) sets the same from code instead:
// tt_disk_full_from_now.
//
// Space set aside outside SQLite (posix_fallocate, as the store's reserve does) counts against
// the same budget and is given back when its file is closed: both are interposed here.
#include <dlfcn.h>
#include <fcntl.h>
#include <sqlite3.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>

namespace {

struct File {
  sqlite3_file base;
  sqlite3_file* real;  // the wrapped VFS's file, right after this struct
};

sqlite3_vfs* g_real = nullptr;
sqlite3_io_methods g_methods;
std::atomic<int64_t> g_grown{0};
std::atomic<int64_t> g_budget{-1};         // < 0: no limit
std::atomic<int64_t> g_refusals_left{-1};  // < 0: refuse for ever

std::atomic<int> g_reserve_fd{-1};  // the one file posix_fallocate grew (the store's reserve)
std::atomic<int64_t> g_reserve_bytes{0};

sqlite3_file* Real(sqlite3_file* f) { return reinterpret_cast<File*>(f)->real; }

int Write(sqlite3_file* f, const void* data, int n, sqlite3_int64 offset) {
  sqlite3_file* real = Real(f);
  sqlite3_int64 size = 0;
  if (g_budget >= 0 && real->pMethods->xFileSize(real, &size) == SQLITE_OK && offset + n > size &&
      g_refusals_left.load() != 0) {
    const int64_t growth = offset + n - size;
    if (g_grown.load() + growth > g_budget) {
      if (g_refusals_left.load() > 0) g_refusals_left.fetch_sub(1);
      return SQLITE_FULL;
    }
    g_grown.fetch_add(growth);
  }
  return real->pMethods->xWrite(real, data, n, offset);
}

int Close(sqlite3_file* f) { return Real(f)->pMethods->xClose(Real(f)); }
int Read(sqlite3_file* f, void* d, int n, sqlite3_int64 o) {
  return Real(f)->pMethods->xRead(Real(f), d, n, o);
}
int Truncate(sqlite3_file* f, sqlite3_int64 s) { return Real(f)->pMethods->xTruncate(Real(f), s); }
int Sync(sqlite3_file* f, int flags) { return Real(f)->pMethods->xSync(Real(f), flags); }
int FileSize(sqlite3_file* f, sqlite3_int64* s) { return Real(f)->pMethods->xFileSize(Real(f), s); }
int Lock(sqlite3_file* f, int l) { return Real(f)->pMethods->xLock(Real(f), l); }
int Unlock(sqlite3_file* f, int l) { return Real(f)->pMethods->xUnlock(Real(f), l); }
int CheckReserved(sqlite3_file* f, int* r) {
  return Real(f)->pMethods->xCheckReservedLock(Real(f), r);
}
int FileControl(sqlite3_file* f, int op, void* arg) {
  return Real(f)->pMethods->xFileControl(Real(f), op, arg);
}
int SectorSize(sqlite3_file* f) { return Real(f)->pMethods->xSectorSize(Real(f)); }
int DeviceCharacteristics(sqlite3_file* f) {
  return Real(f)->pMethods->xDeviceCharacteristics(Real(f));
}
int ShmMap(sqlite3_file* f, int page, int size, int extend, void volatile** p) {
  return Real(f)->pMethods->xShmMap(Real(f), page, size, extend, p);
}
int ShmLock(sqlite3_file* f, int offset, int n, int flags) {
  return Real(f)->pMethods->xShmLock(Real(f), offset, n, flags);
}
void ShmBarrier(sqlite3_file* f) { Real(f)->pMethods->xShmBarrier(Real(f)); }
int ShmUnmap(sqlite3_file* f, int del) { return Real(f)->pMethods->xShmUnmap(Real(f), del); }
int Fetch(sqlite3_file* f, sqlite3_int64 o, int n, void** p) {
  return Real(f)->pMethods->xFetch(Real(f), o, n, p);
}
int Unfetch(sqlite3_file* f, sqlite3_int64 o, void* p) {
  return Real(f)->pMethods->xUnfetch(Real(f), o, p);
}

int Open(sqlite3_vfs* vfs, const char* name, sqlite3_file* f, int flags, int* out_flags) {
  File* file = reinterpret_cast<File*>(f);
  file->real = reinterpret_cast<sqlite3_file*>(file + 1);
  const int rc = g_real->xOpen(g_real, name, file->real, flags, out_flags);
  // SQLite calls xClose only when pMethods is set: leave it unset if the real open failed.
  file->base.pMethods = file->real->pMethods != nullptr ? &g_methods : nullptr;
  (void)vfs;
  return rc;
}

int Delete(sqlite3_vfs*, const char* n, int sync) { return g_real->xDelete(g_real, n, sync); }
int Access(sqlite3_vfs*, const char* n, int flags, int* out) {
  return g_real->xAccess(g_real, n, flags, out);
}
int FullPathname(sqlite3_vfs*, const char* n, int size, char* out) {
  return g_real->xFullPathname(g_real, n, size, out);
}
void* DlOpen(sqlite3_vfs*, const char* n) { return g_real->xDlOpen(g_real, n); }
void DlError(sqlite3_vfs*, int n, char* msg) { g_real->xDlError(g_real, n, msg); }
void (*DlSym(sqlite3_vfs*, void* h, const char* s))(void) { return g_real->xDlSym(g_real, h, s); }
void DlClose(sqlite3_vfs*, void* h) { g_real->xDlClose(g_real, h); }
int Randomness(sqlite3_vfs*, int n, char* out) { return g_real->xRandomness(g_real, n, out); }
int Sleep(sqlite3_vfs*, int us) { return g_real->xSleep(g_real, us); }
int CurrentTime(sqlite3_vfs*, double* t) { return g_real->xCurrentTime(g_real, t); }
int GetLastError(sqlite3_vfs*, int n, char* msg) { return g_real->xGetLastError(g_real, n, msg); }
int CurrentTimeInt64(sqlite3_vfs*, sqlite3_int64* t) {
  return g_real->xCurrentTimeInt64(g_real, t);
}

sqlite3_vfs g_vfs;

__attribute__((constructor)) void Install() {
  if (const char* v = getenv("TT_DISK_FULL_AFTER")) g_budget = atoll(v);
  if (const char* v = getenv("TT_DISK_FULL_REFUSALS")) g_refusals_left = atoll(v);
  g_real = sqlite3_vfs_find(nullptr);
  if (g_real == nullptr) return;
  g_methods = {3,
               Close,
               Read,
               Write,
               Truncate,
               Sync,
               FileSize,
               Lock,
               Unlock,
               CheckReserved,
               FileControl,
               SectorSize,
               DeviceCharacteristics,
               ShmMap,
               ShmLock,
               ShmBarrier,
               ShmUnmap,
               Fetch,
               Unfetch};
  g_vfs = *g_real;
  g_vfs.iVersion = 2;  // no xSetSystemCall & co.
  g_vfs.szOsFile = static_cast<int>(sizeof(File)) + g_real->szOsFile;
  g_vfs.zName = "tt_disk_full";
  g_vfs.pAppData = nullptr;
  g_vfs.pNext = nullptr;
  g_vfs.xOpen = Open;
  g_vfs.xDelete = Delete;
  g_vfs.xAccess = Access;
  g_vfs.xFullPathname = FullPathname;
  g_vfs.xDlOpen = DlOpen;
  g_vfs.xDlError = DlError;
  g_vfs.xDlSym = DlSym;
  g_vfs.xDlClose = DlClose;
  g_vfs.xRandomness = Randomness;
  g_vfs.xSleep = Sleep;
  g_vfs.xCurrentTime = CurrentTime;
  g_vfs.xGetLastError = GetLastError;
  g_vfs.xCurrentTimeInt64 = CurrentTimeInt64;
  sqlite3_vfs_register(&g_vfs, 1);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int posix_fallocate(int fd, off_t offset,
                                                                      off_t len) {
  using Fn = int (*)(int, off_t, off_t);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "posix_fallocate"));
  if (g_budget >= 0 && g_refusals_left.load() != 0) {
    if (g_grown.load() + len > g_budget) return ENOSPC;
    g_grown.fetch_add(len);
    g_reserve_bytes.fetch_add(len);
    g_reserve_fd.store(fd);
  }
  return real(fd, offset, len);
}
extern "C" __attribute__((visibility("default"))) int posix_fallocate64(int fd, off_t offset,
                                                                        off_t len) {
  return posix_fallocate(fd, offset, len);
}

extern "C" __attribute__((visibility("default"))) int close(int fd) {
  using Fn = int (*)(int);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "close"));
  int expected = fd;
  if (fd >= 0 && g_reserve_fd.compare_exchange_strong(expected, -1)) {
    g_grown.fetch_sub(g_reserve_bytes.exchange(0));
  }
  return real(fd);
}

// The disk is full once the files grow by more than `bytes` from now on (< 0: never full);
// after `refusals` refused writes (< 0: never) space returns.
extern "C" __attribute__((visibility("default"))) void tt_disk_full_from_now(int64_t bytes,
                                                                             int64_t refusals) {
  g_refusals_left.store(refusals);
  g_budget.store(bytes < 0 ? -1 : g_grown.load() + bytes);
}
