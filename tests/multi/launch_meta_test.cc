#include "core/launch_meta.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace tokentrace {
namespace {

void Clear() {
  for (const char* v : {"RANK",
                        "LOCAL_RANK",
                        "WORLD_SIZE",
                        "GROUP_RANK",
                        "TORCHELASTIC_RUN_ID",
                        "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_LOCAL_RANK",
                        "OMPI_COMM_WORLD_SIZE",
                        "PMI_RANK",
                        "PMIX_RANK",
                        "SLURM_PROCID",
                        "SLURM_LOCALID",
                        "SLURM_NTASKS",
                        "SLURM_NODEID",
                        "SLURM_JOB_ID",
                        "SLURM_STEP_ID",
                        "MPI_LOCALRANKID",
                        "PMI_SIZE",
                        "OMPI_MCA_orte_ess_jobid",
                        "PMIX_NAMESPACE",
                        "PMI_JOBID",
                        "TOKENTRACE_RUN_ID"}) {
    unsetenv(v);
  }
}

TEST(LaunchMetaTest, Torchrun) {
  Clear();
  setenv("RANK", "5", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("GROUP_RANK", "2", 1);
  setenv("TORCHELASTIC_RUN_ID", "job42", 1);
  setenv("TOKENTRACE_RUN_ID", "123-456", 1);
  const LaunchInfo l = LaunchFromEnvironment();
  EXPECT_EQ(l.rank, "5");
  EXPECT_EQ(l.local_rank, "1");
  EXPECT_EQ(l.world_size, "8");
  EXPECT_EQ(l.group_rank, "2");
  EXPECT_EQ(l.launch_id, "job42");
  EXPECT_EQ(l.launch_id_from, "TORCHELASTIC_RUN_ID");
  EXPECT_FALSE(l.host.empty());
  // torchrun's default id "none" is no id: the tokentrace run id stands in.
  setenv("TORCHELASTIC_RUN_ID", "none", 1);
  EXPECT_EQ(LaunchFromEnvironment().launch_id, "123-456");
  Clear();
}

TEST(LaunchMetaTest, SlurmAndOpenMpiAndNothing) {
  Clear();
  EXPECT_EQ(LaunchFromEnvironment().rank, "0");
  EXPECT_EQ(LaunchFromEnvironment().launch_id, "");
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_LOCALID", "0", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_JOB_ID", "777", 1);
  setenv("SLURM_STEP_ID", "0", 1);
  LaunchInfo l = LaunchFromEnvironment();
  EXPECT_EQ(l.rank, "3");
  EXPECT_EQ(l.world_size, "4");
  EXPECT_EQ(l.launch_id, "777.0");
  Clear();
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "6", 1);
  setenv("OMPI_MCA_orte_ess_jobid", "99", 1);
  l = LaunchFromEnvironment();
  EXPECT_EQ(l.rank, "2");
  EXPECT_EQ(l.world_size, "6");
  EXPECT_EQ(l.launch_id, "99");
  Clear();
}

TEST(LaunchMetaTest, AnchorsRoundTripAndPairTheClocks) {
  const ClockAnchor a = TakeClockAnchor();
  ClockAnchor b;
  ASSERT_TRUE(ParseAnchor(FormatAnchor(a), &b));
  EXPECT_EQ(a.trace_ns, b.trace_ns);
  EXPECT_EQ(a.wall_ns, b.wall_ns);
  // Two anchors a moment apart give the same offset to well under a millisecond.
  const ClockAnchor c = TakeClockAnchor();
  EXPECT_LT(std::llabs(c.offset_ns() - a.offset_ns()), 1000000);
  EXPECT_FALSE(ParseAnchor("12", &b));
  EXPECT_FALSE(ParseAnchor("12 x", &b));
}

}  // namespace
}  // namespace tokentrace
