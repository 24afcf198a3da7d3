"""How long the stream waits at an in-stream plan inside a CUDA graph, when the host launches one step ahead."""
import statistics, sys, time, threading
import numpy as np, torch, codec
torch.manual_seed(0)
R, cols, page, H, Hkv, D = 64, 1900, 16, 32, 8, 128
pages = R * 200 + 8 * 1700
table = torch.zeros((R, cols), dtype=torch.int32, device="cuda")
lens = torch.zeros(R + 1, dtype=torch.int32, device="cuda")
rng = np.random.default_rng(0)
t = np.zeros((R, cols), np.int32); n = np.zeros(R, np.int64); nxt = 8 * 1700
for r in range(R):
    doc = r // 8; shared = 1700; own = 10
    t[r, :shared] = np.arange(doc * 1700, doc * 1700 + shared); t[r, shared:shared + own] = np.arange(nxt, nxt + own); nxt += own
    n[r] = (shared + own - 1) * page + 5
table.copy_(torch.from_numpy(t)); lens.copy_(torch.from_numpy(np.concatenate([[0], np.cumsum(n)]).astype(np.int32)))
w = codec.BatchPrefixDecodeWrapper(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"), use_cuda_graph=True,
                                   max_batch_size=R, max_num_pages=R * cols)
q = torch.randn((R, H, D), dtype=torch.bfloat16, device="cuda"); out = torch.empty_like(q)
cache = torch.randn((nxt, 2, page, Hkv, D), dtype=torch.bfloat16, device="cuda")
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
e0, e1, e2 = (torch.cuda.Event(enable_timing=True, external=True) for _ in range(3))
def step():
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 20): a @ a   # ~GPU work before the plan
    e0.record()
    w.plan_block_table_in_stream(table, lens, H, Hkv, D, page, num_pages=nxt, cumulative=True, q_data_type=torch.bfloat16)
    e1.record()
    for _ in range(36): w.run(q, cache, out=out)
    e2.record()
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    step(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s): step()
def busy(ms):
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end: pass
h2d, d2h = torch.cuda.Stream(), torch.cuda.Stream()
host_in = torch.zeros(8192, dtype=torch.int32).pin_memory(); dev_in = torch.zeros(8192, dtype=torch.int32, device="cuda")
host_out = torch.zeros(1024, dtype=torch.int32).pin_memory(); dev_out = torch.zeros(1024, dtype=torch.int32, device="cuda")
def engine_like():  # the engine's async IOs: inputs H2D on one stream, outputs D2H on another after the compute
    with torch.cuda.stream(h2d):
        dev_in.copy_(host_in, non_blocking=True)
    s.wait_stream(h2d)
    g.replay()
    ev = torch.cuda.Event(); ev.record(s); d2h.wait_event(ev)
    with torch.cuda.stream(d2h):
        host_out.copy_(dev_out, non_blocking=True)
def scenario(name, ahead, work, launch=None):
    launch = launch or g.replay
    plan, span, wall = [], [], []
    done = torch.cuda.Event()
    with torch.cuda.stream(s):
        g.replay(); torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(40):
            if ahead:
                launch(); prev = done; done = torch.cuda.Event(); done.record(s)
                prev.synchronize()
            else:
                g.replay(); s.synchronize()
            work()
            if not ahead or i > 0:  # the events hold the last finished replay's times only when nothing is queued behind
                pass
        torch.cuda.synchronize(); wall = (time.perf_counter() - t0) / 40 * 1e3
        for i in range(10):  # the node's own latency, read replay by replay
            launch(); work() if ahead else None; torch.cuda.synchronize()
            plan.append(e0.elapsed_time(e1)); span.append(e0.elapsed_time(e2))
    print(f"{name:34s} step {wall:6.2f} ms   plan node {statistics.median(plan):5.2f} ms   plan+36 runs {statistics.median(span):6.2f} ms", flush=True)
scenario("sync, idle host", False, lambda: None)
scenario("sync, host busy 8 ms (GIL held)", False, lambda: busy(8))
scenario("ahead, idle host", True, lambda: None)
scenario("ahead, host busy 8 ms (GIL held)", True, lambda: busy(8))
scenario("ahead, host sleeps 8 ms", True, lambda: time.sleep(0.008))
scenario("ahead, engine-like copy streams", True, lambda: None, engine_like)
scenario("ahead, engine-like, host busy 8 ms", True, lambda: busy(8), engine_like)
print("stats", w.plan_stats)
