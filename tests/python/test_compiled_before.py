"""A model compiled and run before an ops=True trace: its graphs have no kernel map (the map is
noted while Inductor compiles under the trace), so nothing of it can be attributed to modules.
Every op it runs in its compiled regions is counted as compiled_unattributed, and the trace
names the regions that ran without a map (meta compiled_unmapped, a line in the report).
Before, such a trace counted nothing and said nothing."""

import sqlite3

import torch
from torch import nn

import tokentrace as tt


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_graphs_compiled_before_the_trace_are_counted_and_named():
    torch.manual_seed(0)
    model = Model().eval()
    model.compile(backend="aot_eager")  # TorchDynamo and AOTAutograd, no Inductor: fast
    x = torch.randn(3, 4)
    with torch.no_grad():
        model(x)  # compiled and warmed up before the trace
        trace = tt.trace(model, x, kernels="off", ops=True)
    regions = [s for s in trace.sites if s.startswith("Torch-Compiled Region")]
    assert len(regions) == 1, regions  # one graph; its compile id counts the process's compiles
    compile_id = regions[0].split(": ")[1]
    region = trace[regions[0] + ":1"]
    con = sqlite3.connect(trace.path)
    (ops_in_region,) = con.execute(
        "SELECT count(*) FROM calls c JOIN sites s ON s.id = c.site_id "
        "WHERE c.parent_id = ? AND s.kind = 'op'", (region.id,)).fetchone()
    con.close()
    assert ops_in_region > 0
    assert trace.losses["compiled_unattributed"] == ops_in_region
    assert trace.meta["compiled_unmapped"] == compile_id
    assert (f"compiled regions without a kernel map (compiled before the trace): {compile_id}"
            in trace.report())
