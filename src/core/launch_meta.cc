#include "core/launch_meta.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>

#include "core/clock.h"

namespace tokentrace {
namespace {

// The first of `names` that is set and not empty; "" when none is. *from gets its name.
std::string FirstSet(std::initializer_list<const char*> names, std::string* from = nullptr) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') {
      if (from != nullptr) *from = name;
      return v;
    }
  }
  return "";
}

}  // namespace

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

LaunchInfo LaunchFromEnvironment() {
  LaunchInfo l;
  // RANK first, then the MPI/Slurm global ranks; LOCAL_RANK last, as before (a job that sets
  // only LOCAL_RANK runs on one node, where it is the global rank).
  l.rank = FirstSet(
      {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "LOCAL_RANK"});
  if (l.rank.empty()) l.rank = "0";
  l.local_rank =
      FirstSet({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"});
  l.world_size = FirstSet({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"});
  l.group_rank = FirstSet({"GROUP_RANK", "SLURM_NODEID"});
  l.host = HostName();
  // torchrun's default rendezvous id is the literal "none" on every launch: not an id.
  std::string from;
  std::string id = FirstSet({"TORCHELASTIC_RUN_ID"}, &from);
  if (id == "none") id.clear();
  if (id.empty()) {
    const std::string job = FirstSet({"SLURM_JOB_ID"}, &from);
    if (!job.empty()) id = job + "." + FirstSet({"SLURM_STEP_ID"});
  }
  if (id.empty()) id = FirstSet({"OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE", "PMI_JOBID"}, &from);
  // Last: the id the first preloaded process of `tokentrace run` gave its descendants
  // (config.h kRunIdVariable), shared by the ranks of one node.
  if (id.empty()) id = FirstSet({"TOKENTRACE_RUN_ID"}, &from);
  l.launch_id = id;
  l.launch_id_from = id.empty() ? "" : from;
  return l;
}

std::vector<std::pair<std::string, std::string>> LaunchMetaRows(const LaunchInfo& l) {
  return {{kMetaRank, l.rank},
          {kMetaLocalRank, l.local_rank},
          {kMetaWorldSize, l.world_size},
          {kMetaGroupRank, l.group_rank},
          {kMetaHost, l.host},
          {kMetaLaunchId, l.launch_id},
          {kMetaLaunchIdFrom, l.launch_id_from}};
}

ClockAnchor TakeClockAnchor() {
  const int64_t before = clock::HostNowNs();
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  const int64_t after = clock::HostNowNs();
  ClockAnchor a;
  a.trace_ns = before + (after - before) / 2;
  a.wall_ns = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  return a;
}

std::string FormatAnchor(const ClockAnchor& a) {
  return std::to_string(a.trace_ns) + " " + std::to_string(a.wall_ns);
}

bool ParseAnchor(const std::string& text, ClockAnchor* a) {
  const char* p = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long t = std::strtoll(p, &end, 10);
  if (end == p || *end != ' ' || errno != 0) return false;
  p = end + 1;
  const long long w = std::strtoll(p, &end, 10);
  if (end == p || *end != '\0' || errno != 0) return false;
  a->trace_ns = t;
  a->wall_ns = w;
  return true;
}

}  // namespace tokentrace
