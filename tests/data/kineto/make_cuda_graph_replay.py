"""Toy CUDA graph replay under torch.profiler: the fixture for graph-kernel attribution."""
import collections
import gzip
import json
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile, record_function

out = sys.argv[1]
torch.manual_seed(0)
w1 = torch.randn(256, 256, device="cuda")
w2 = torch.randn(256, 256, device="cuda")
x = torch.randn(4, 256, device="cuda")

def step():
    with record_function("ks.module:model.layers.0.mlp"):
        h = torch.relu(x @ w1)
    with record_function("ks.module:model.layers.1.mlp"):
        y = (h @ w2) + x
    with record_function("ks.module:lm_head"):
        return y.sum(dim=-1)

s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        step()
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_out = step()
torch.cuda.synchronize()

with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    with record_function("ks.phase:prefill"):
        step()
    with record_function("ks.phase:decode:0"):
        step()
    for i in range(1, 4):
        with record_function(f"ks.phase:decode:{i}"):
            g.replay()
    torch.cuda.synchronize()
path = os.path.join(out, "trace.json")
prof.export_chrome_trace(path)
with open(path) as f:
    doc = json.load(f)
events = doc["traceEvents"]
cats = collections.Counter(e.get("cat") for e in events)
print("cats", dict(cats))
for e in events:
    if e.get("cat") in ("kernel", "cuda_runtime", "cuda_driver", "gpu_memcpy", "gpu_memset"):
        print(e.get("cat"), e.get("name")[:60], e.get("ts"), json.dumps(e.get("args"))[:300])
with open(path, "rb") as f, gzip.open(os.path.join(out, "cuda_graph_replay.json.gz"), "wb") as g2:
    g2.write(f.read())
os.remove(path)
print(torch.__version__, torch.cuda.get_device_name())
