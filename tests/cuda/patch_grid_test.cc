// The kernel's element walks (cuda/patch_grid.h) run on the host for every (block, thread) of
// several grids, against ApplyPatchesHost. This checks the kernel's index math (row split,
// mixed-radix carries, ownership of overlapping boxes) on machines without a GPU. Threads run
// one after another here, so a walk that wrote an element twice shows up as a double edit
// (scale, add) and a walk that missed one as an unedited element.
#include "cuda/patch_grid.h"

#include <gtest/gtest.h>

#include "patch_cases.h"
#include "patch_test_util.h"

namespace tokentrace::patch::testing {
namespace {

struct Grid {
  int64_t blocks, threads;
};

// Mirrors the kernel: the call counter and match scan of ApplyPatchesKernel (ScanMatches, in
// table order, at most kMaxMatchesPerCall slots), then every thread's walk.
Outcome RunEmulated(const Scenario& sc, Grid grid) {
  Outcome o;
  std::vector<PatchEntry> entries = sc.entries;
  for (size_t i = 0; i < entries.size(); ++i)
    if (sc.operand_of[i]) SetOperand(&entries[i], *sc.operand_of[i]);
  o.fires.assign(entries.size(), 0);
  const Tensor& init = sc.initial;
  OutputDesc out{};
  out.ndim = init.ndim();
  out.dtype = static_cast<uint32_t>(init.dtype);
  for (int d = 0; d < init.ndim(); ++d) {
    out.shape[d] = init.shape[d];
    out.strides[d] = init.strides[d];
  }
  // The mask regions of a table, as SetRowMaskHost writes them.
  std::vector<RowMaskCounts> counts(sc.max_masks, RowMaskCounts{0, 0});
  std::vector<uint8_t> rows(size_t{sc.max_masks} * sc.max_rows);
  const RowMaskView masks{counts.data(), rows.data(), sc.max_masks, sc.max_rows};
  std::vector<std::vector<uint8_t>> current;
  for (int call = 1; call <= sc.calls; ++call) {
    const uint32_t token = sc.tokens.empty() ? 0 : sc.tokens[call - 1];
    UpdateMasks(sc, call, &current);
    for (uint32_t k = 0; k < sc.max_masks; ++k) {
      counts[k] = RowMaskCounts{static_cast<uint32_t>(current[k].size()), 0};
      for (size_t r = 0; r < current[k].size(); ++r) {
        rows[k * sc.max_rows + r] = current[k][r];
        counts[k].mask_marked += current[k][r] != 0;
      }
    }
    std::vector<ResolvedEntry> slots;
    for (size_t i = 0; i < entries.size(); ++i) {
      const PatchEntry& e = entries[i];
      if (e.site_id != sc.site || !SelectorMatches(e.selector, call, token, masks)) continue;
      if (slots.size() == static_cast<size_t>(kMaxMatchesPerCall)) break;
      ResolvedEntry r{};
      if (ResolveEntryCore(e, static_cast<uint32_t>(i), out.ndim, out.shape, out.dtype, masks, &r)
              .code)
        r.valid = 0;
      else
        ++o.fires[i];
      slots.push_back(r);
    }
    Tensor t = init;
    const uint32_t n = static_cast<uint32_t>(slots.size());
    for (int64_t b = 0; b < grid.blocks; ++b) {
      for (int64_t th = 0; th < grid.threads; ++th) {
        const GridPos g{b, grid.blocks, th, grid.threads};
        if (n == 1) {
          if (slots[0].valid) ApplySingle(g, slots[0], t.data(), out);
        } else {
          for (uint32_t j = 0; j < n; ++j)
            if (slots[j].valid) ApplyEntry(g, slots.data(), j, n, t.data(), out);
        }
      }
    }
    o.outputs.push_back(std::move(t));
  }
  return o;
}

class PatchGridTest : public ::testing::TestWithParam<std::pair<std::string, Scenario>> {};

TEST_P(PatchGridTest, EmulatedKernelMatchesHost) {
  const Scenario& sc = GetParam().second;
  std::string error;
  const Outcome host = RunHost(sc, &error);
  ASSERT_EQ(error, "");
  const bool large = sc.initial.numel() > 100000;
  const std::vector<Grid> grids =
      large ? std::vector<Grid>{{13, 64}, {2, 256}}
            : std::vector<Grid>{{1, 32}, {3, 64}, {7, 32}, {2, 256}, {5, 96}, {1, 1}};
  for (const Grid& grid : grids) {
    const Outcome emu = RunEmulated(sc, grid);
    ASSERT_EQ(emu.outputs.size(), host.outputs.size());
    for (size_t c = 0; c < host.outputs.size(); ++c)
      EXPECT_TRUE(emu.outputs[c].bytes == host.outputs[c].bytes)
          << grid.blocks << "x" << grid.threads << " call " << c + 1;
    EXPECT_EQ(emu.fires, host.fires);
  }
}

std::vector<std::pair<std::string, Scenario>> GridScenarios() {
  auto all = AllScenarios();
  for (auto& s : LargeScenarios()) all.push_back(std::move(s));
  return all;
}

INSTANTIATE_TEST_SUITE_P(All, PatchGridTest, ::testing::ValuesIn(GridScenarios()),
                         [](const auto& info) { return info.param.first; });

}  // namespace
}  // namespace tokentrace::patch::testing
