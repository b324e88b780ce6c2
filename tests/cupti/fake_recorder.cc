#include "tests/cupti/fake_recorder.h"

#include <atomic>

#include "core/recorder.h"

namespace tokentrace {
namespace fake {
namespace {
std::atomic<bool> g_active{true};
std::mutex g_mutex;
std::vector<RecorderCall> g_calls;
void Add(RecorderCall c) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_calls.push_back(c);
}
}  // namespace

void SetActive(bool active) { g_active.store(active); }
std::vector<RecorderCall> TakeCalls() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<RecorderCall> out;
  out.swap(g_calls);
  return out;
}
}  // namespace fake

namespace recorder {
using fake::RecorderCall;
bool Active() { return fake::g_active.load(); }
void Push(uint32_t) {}
void Pop() {}
void Mark(uint32_t) {}
void Launch(uint64_t corr) { fake::Add({RecorderCall::kLaunch, corr, 0, 0}); }
void GraphLaunch(uint64_t corr, uint32_t exec) {
  fake::Add({RecorderCall::kGraphLaunch, corr, exec, 0});
}
void Escape(uint64_t corr, EscapeKind kind) {
  fake::Add({RecorderCall::kEscape, corr, static_cast<uint64_t>(kind), 0});
}
void GraphNodeCreated(uint32_t graph, uint64_t node) {
  fake::Add({RecorderCall::kNodeCreated, graph, node, 0});
}
void GraphNodeCloned(uint64_t original, uint32_t exec, uint64_t node) {
  fake::Add({RecorderCall::kNodeCloned, original, exec, node});
}
void GraphExecCreated(uint32_t graph, uint32_t original, uint32_t exec) {
  fake::Add({RecorderCall::kExecCreated, graph, exec, original});
}
void GraphCloned(uint32_t original, uint32_t clone) {
  fake::Add({RecorderCall::kGraphCloned, original, clone, 0});
}
CurrentCall Current() { return {}; }
}  // namespace recorder
}  // namespace tokentrace
