// Experiment driver (not committed): per-task timings of the PAC kernel built with -DCODEC_PAC_TRACE.
#include <cuda_runtime_api.h>
#include <cstdio>
#include <vector>
#include <string>
#include <algorithm>
#include "codec/workload/workload.hpp"
#include "codec/forest/forest.hpp"
#include "codec/plan/planner.hpp"
#include "codec/cost/cost_model.hpp"
#include "codec/engine/cuda_engine.hpp"
namespace codec { void pac_trace_set(void*, void*); }
using namespace codec;
#define CK(x) do { cudaError_t e = (x); if (e) { printf("cuda %s line %d\n", cudaGetErrorString(e), __LINE__); return 1; } } while (0)
int main(int argc, char** argv) {
  const char* table = argv[1];
  FILE* f = fopen(argv[2], "w");
  fprintf(f, "workload,variant,task,block,sm,node,head,rows,kv_len,start_ns,end_ns,cycles,run_ms\n");
  void* flush; CK(cudaMalloc(&flush, 256 << 20));
  cudaStream_t st; CK(cudaStreamCreate(&st));
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  for (int a = 3; a < argc; ++a) {
    Workload w = builtin_workload(argv[a]);
    Batch b = materialize(w);
    Forest forest = derive_forest(b.page_table());
    TableCostModel cost(CostTable::load(table));
    PlannerOptions opt = cuda_planner_options(w.heads, w.dtype);
    void *k, *v, *q, *out, *lse;
    CK(cudaMalloc(&k, b.k.size())); CK(cudaMalloc(&v, b.v.size())); CK(cudaMalloc(&q, b.q.size()));
    size_t rows = size_t(b.num_requests()) * w.heads.num_qo_heads;
    CK(cudaMalloc(&out, rows * w.heads.head_dim * 2)); CK(cudaMalloc(&lse, rows * 4));
    CK(cudaMemcpy(k, b.k.data(), b.k.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(v, b.v.data(), b.v.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(q, b.q.data(), b.q.size(), cudaMemcpyHostToDevice));
    PagedKV kv = PagedKV::nhd(k, v, b.dtype, b.num_pages, b.page_size, w.heads.num_kv_heads, w.heads.head_dim);
    for (int variant = 0; variant < 2; ++variant) {
      Plan plan = make_plan(variant ? flatten(forest) : forest, w.heads, cost, opt);
      size_t wsb = cuda_workspace_bytes(plan);
      void* ws; CK(cudaMalloc(&ws, wsb));
      std::span<std::byte> wsp(static_cast<std::byte*>(ws), wsb);
      cuda_upload_plan(plan, wsp, st);
      PlanView pv = plan.view();
      void* tr; CK(cudaMalloc(&tr, size_t(pv.num_tasks) * 32 + 32));
      void* chain; CK(cudaMalloc(&chain, size_t(pv.num_blocks) * 40));
      for (int rep = 0; rep < 4; ++rep) {
        pac_trace_set(rep == 3 ? tr : nullptr, rep == 3 ? chain : nullptr);
        CK(cudaMemsetAsync(flush, rep, 256 << 20, st));
        cudaEventRecord(e0, st);
        run_cuda(plan, kv, {q, out, static_cast<float*>(lse)}, wsp, st);
        cudaEventRecord(e1, st);
      }
      CK(cudaStreamSynchronize(st));
      float ms; cudaEventElapsedTime(&ms, e0, e1);
      std::vector<unsigned long long> h(size_t(pv.num_tasks) * 4);
      CK(cudaMemcpy(h.data(), tr, h.size() * 8, cudaMemcpyDeviceToHost));
      for (int i = 0; i < pv.num_tasks; ++i) {
        const Task& t = pv.tasks[i];
        fprintf(f, "%s,%s,%d,%llu,%llu,%d,%d,%d,%d,%llu,%llu,%llu,%.5f\n", argv[a], variant ? "flat" : "codec", i,
                h[4 * i + 2] & 0xffffffffull, h[4 * i + 2] >> 32, t.node, t.kv_head, t.row_end - t.row_begin,
                t.kv_end - t.kv_begin, h[4 * i], h[4 * i + 1], h[4 * i + 3], ms);
      }
      printf("%s %s: %d tasks, %.4f ms\n", argv[a], variant ? "flat" : "codec", pv.num_tasks, ms);
      std::vector<unsigned long long> c(size_t(pv.num_blocks) * 5);
      CK(cudaMemcpy(c.data(), chain, c.size() * 8, cudaMemcpyDeviceToHost));
      for (int k = 1; k < 5; ++k) {
        std::vector<double> v;
        for (int b = 0; b < pv.num_blocks; ++b) v.push_back(double(c[5 * b + k] & ~(1ull << 63)) / 1000);
        std::sort(v.begin(), v.end());
        printf("   level %d (%s): median %.3f us, p90 %.3f, max %.3f\n", k, k == 1 ? "block_indptr" : k == 2 ? "task" : k == 3 ? "page id" : "kv", v[v.size() / 2], v[v.size() * 9 / 10], v.back());
      }
      cudaFree(chain);
      cudaFree(tr); cudaFree(ws);
    }
    cudaFree(k); cudaFree(v); cudaFree(q); cudaFree(out); cudaFree(lse);
  }
  fclose(f);
  return 0;
}
