#include "core/site_registry.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>

#include "core/token_pattern.h"

namespace tokentrace::sites {
namespace {

constexpr uint32_t kSlots = kMaxSites * 2;  // load factor <= 1/2
constexpr uint32_t kSlotMask = kSlots - 1;

struct Slot {
  std::atomic<uint64_t> tag{0};  // (hash | 1): nonzero once published
  std::atomic<uint32_t> id{0};
};

struct Registry {
  Slot slots[kSlots];
  const char* names[kMaxSites] = {};
  uint32_t lengths[kMaxSites] = {};
  SiteKind kinds[kMaxSites] = {};
  std::atomic<uint8_t> is_token[kMaxSites] = {};
  std::atomic<uint32_t> count{1};  // id 0 is reserved for overflow
  std::atomic<uint64_t> overflows{0};
  std::mutex insert_mutex;
  std::unique_ptr<TokenPattern> token_regex;
  std::vector<std::unique_ptr<char[]>> storage;
};

Registry& R() {
  static Registry* r = [] {
    auto* reg = new Registry();  // never destroyed: NVTX handlers may run during exit
    reg->names[0] = "(too many sites)";
    reg->lengths[0] = static_cast<uint32_t>(strlen(reg->names[0]));
    reg->kinds[0] = SiteKind::kRange;
    return reg;
  }();
  return *r;
}

uint64_t Hash(const char* s, size_t len, SiteKind kind) {
  uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(kind);
  for (size_t i = 0; i < len; ++i) {
    h ^= static_cast<unsigned char>(s[i]);
    h *= 1099511628211ull;
  }
  return h | 1;  // never 0: 0 marks an empty slot
}

bool ComputeIsToken(Registry& r, uint32_t id) {
  if (r.kinds[id] == SiteKind::kRoot) return true;
  if (r.kinds[id] != SiteKind::kRange || !r.token_regex) return false;
  return r.token_regex->FullMatch(r.names[id], r.lengths[id]);
}

// Probes for (name, kind). Lock-free: a published slot never changes, so a match is final.
// Returns the id, or kNotFound with *empty_slot set to the first empty slot of the chain.
constexpr uint32_t kNotFound = ~0u;
uint32_t Find(Registry& r, uint64_t tag, const char* name, size_t len, SiteKind kind,
              uint32_t* empty_slot) {
  for (uint32_t i = static_cast<uint32_t>(tag) & kSlotMask;; i = (i + 1) & kSlotMask) {
    uint64_t t = r.slots[i].tag.load(std::memory_order_acquire);
    if (t == 0) {
      *empty_slot = i;
      return kNotFound;
    }
    if (t == tag) {
      uint32_t id = r.slots[i].id.load(std::memory_order_relaxed);
      if (r.kinds[id] == kind && r.lengths[id] == len && memcmp(r.names[id], name, len) == 0) {
        return id;
      }
    }
  }
}

}  // namespace

uint32_t Intern(const char* name, SiteKind kind) { return Intern(name, strlen(name), kind); }

uint32_t Intern(const char* name, size_t len, SiteKind kind) {
  Registry& r = R();
  const uint64_t tag = Hash(name, len, kind);
  uint32_t i = 0;
  if (uint32_t id = Find(r, tag, name, len, kind, &i); id != kNotFound) return id;
  std::lock_guard<std::mutex> lock(r.insert_mutex);
  // Probe again under the lock: another thread may have inserted it meanwhile.
  if (uint32_t id = Find(r, tag, name, len, kind, &i); id != kNotFound) return id;
  uint32_t id = r.count.load(std::memory_order_relaxed);
  if (id >= kMaxSites) {
    r.overflows.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  auto copy = std::make_unique<char[]>(len + 1);
  memcpy(copy.get(), name, len);
  copy[len] = '\0';
  r.names[id] = copy.get();
  r.lengths[id] = static_cast<uint32_t>(len);
  r.kinds[id] = kind;
  r.storage.push_back(std::move(copy));
  r.is_token[id].store(ComputeIsToken(r, id) ? 1 : 0, std::memory_order_relaxed);
  r.count.store(id + 1, std::memory_order_release);
  r.slots[i].id.store(id, std::memory_order_relaxed);
  r.slots[i].tag.store(tag, std::memory_order_release);
  return id;
}

bool IsToken(uint32_t id) {
  return id < kMaxSites && R().is_token[id].load(std::memory_order_relaxed) != 0;
}

void LockForFork() { R().insert_mutex.lock(); }
void UnlockAfterFork() { R().insert_mutex.unlock(); }

void SetTokenRange(const std::string& regex) {
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.insert_mutex);
  r.token_regex.reset();
  if (!regex.empty()) {
    std::string ignored;  // validated by config parsing before we get here
    r.token_regex = TokenPattern::Compile(regex, &ignored);
  }
  uint32_t n = r.count.load(std::memory_order_relaxed);
  for (uint32_t id = 1; id < n; ++id) {
    r.is_token[id].store(ComputeIsToken(r, id) ? 1 : 0, std::memory_order_relaxed);
  }
}

uint32_t Count() { return R().count.load(std::memory_order_acquire); }

SiteRow Row(uint32_t id) {
  Registry& r = R();
  SiteRow row;
  row.id = id;
  row.name.assign(r.names[id], r.lengths[id]);
  row.kind = r.kinds[id];
  row.is_token = IsToken(id);
  return row;
}

uint64_t TakeOverflows() { return R().overflows.exchange(0, std::memory_order_relaxed); }

}  // namespace tokentrace::sites
