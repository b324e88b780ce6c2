// Process-wide registry of sites: (name, kind) -> small integer id, 1-based.
//
// Lookups of known sites are lock-free (open addressing, slots published with release
// stores), so the NVTX handler for a plain-string push (RangePushA) can afford one per push.
// Inserting a new site takes a mutex and copies the name once; that happens once per site.
// Ids are stable for the life of the process; each session re-emits every site it uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/records.h"

namespace tokentrace::sites {

constexpr uint32_t kMaxSites = 1u << 16;  // ids 1 .. kMaxSites-1; 0 = overflow site

// Returns the id of (name, kind), inserting it if new. Never fails: when the registry is
// full it returns 0 (the "(too many sites)" site) and counts an overflow.
uint32_t Intern(const char* name, SiteKind kind);
uint32_t Intern(const char* name, size_t len, SiteKind kind);

// True when calls of `id` start a token (root sites, and ranges matching the token regex).
bool IsToken(uint32_t id);

// Sets the token-range regex ("" = none) and re-evaluates every known range site.
// Not for the hot path; call before a session starts recording.
// Around fork() (recorder::BeforeFork): no insert is half done in the child.
void LockForFork();
void UnlockAfterFork();  // in the parent and in the child (the forking thread holds it)

void SetTokenRange(const std::string& regex);

// Number of ids handed out so far (max id + 1).
uint32_t Count();

// The row of one id (id < Count()).
SiteRow Row(uint32_t id);

// Times Intern hit the capacity limit since the last call.
uint64_t TakeOverflows();

}  // namespace tokentrace::sites
