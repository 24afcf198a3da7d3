#include "cuda_bench.hpp"

#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "codec/core/error.hpp"
#include "codec/engine/cuda_check.hpp"
#include "cuda_flush.hpp"

namespace codec::tools {

namespace {

// Larger than the H200's 60 MB L2 several times over: reading or writing it
// evicts every line of the previous run, so each timed run reads KV from
// device memory.
constexpr std::size_t kFlushBytes = std::size_t(256) << 20;

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { CODEC_CUDA_CHECK(cudaMalloc(&ptr, std::max<std::size_t>(bytes, 256))); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::byte* bytes() const { return static_cast<std::byte*>(ptr); }
};

}  // namespace

struct CudaBench::Impl {
  const Batch& batch;
  L2Flush flush_mode;
  int sms = 0;  // the read flush's grid: looked up once, not before every timed run
  // sink: the read flush's; sinks: attention sinks (Batch::sinks); k_scale, v_scale: an fp8 cache's
  DeviceBuffer k, v, q, out, lse, flush, sink, sinks, k_scale, v_scale;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;

  Impl(const Batch& b, L2Flush mode)
      : batch(b), flush_mode(mode), k(b.k.size()), v(b.v.size()), q(b.q.size()),
        out(std::size_t(b.num_queries()) * b.heads.num_qo_heads * b.heads.head_dim * dtype_size(b.q_dtype)),
        lse(std::size_t(b.num_queries()) * b.heads.num_qo_heads * sizeof(float)), flush(kFlushBytes),
        sink(sizeof(std::uint32_t)), sinks(b.sinks.size() * sizeof(float)),
        k_scale(b.k_scale.size() * sizeof(float)), v_scale(b.v_scale.size() * sizeof(float)) {
    CODEC_CUDA_CHECK(cudaStreamCreate(&stream));
    CODEC_CUDA_CHECK(cudaEventCreate(&start));
    CODEC_CUDA_CHECK(cudaEventCreate(&stop));
    CODEC_CUDA_CHECK(cudaMemcpy(k.ptr, b.k.data(), b.k.size(), cudaMemcpyHostToDevice));
    CODEC_CUDA_CHECK(cudaMemcpy(v.ptr, b.v.data(), b.v.size(), cudaMemcpyHostToDevice));
    CODEC_CUDA_CHECK(cudaMemcpy(q.ptr, b.q.data(), b.q.size(), cudaMemcpyHostToDevice));
    const std::pair<const std::vector<float>*, void*> floats[] = {
        {&b.sinks, sinks.ptr}, {&b.k_scale, k_scale.ptr}, {&b.v_scale, v_scale.ptr}};
    for (const auto& [host, device] : floats)
      if (!host->empty())
        CODEC_CUDA_CHECK(cudaMemcpy(device, host->data(), host->size() * sizeof(float), cudaMemcpyHostToDevice));
    CODEC_CUDA_CHECK(cudaMemset(flush.ptr, 0, kFlushBytes));  // what a read flush reads is defined
    int device = 0;
    CODEC_CUDA_CHECK(cudaGetDevice(&device));
    CODEC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  }
  ~Impl() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);
  }
  PagedKV kv() const {
    PagedKV kv = PagedKV::nhd(k.ptr, v.ptr, batch.dtype, batch.num_pages, batch.page_size, batch.heads.num_kv_heads,
                              batch.heads.head_dim);
    if (!batch.k_scale.empty()) {  // an fp8 cache's, their device copies
      kv.k_scale = {static_cast<const float*>(k_scale.ptr), int(batch.k_scale.size())};
      kv.v_scale = {static_cast<const float*>(v_scale.ptr), int(batch.v_scale.size())};
    }
    return kv;
  }
  // The first B requests' rows (a plan over a subset of the batch's requests runs on those).
  AttentionIO io(int B) const {
    CODEC_CHECK(B >= 0 && B <= batch.num_queries(), "CudaBench: a plan of ", B, " rows over a batch of ",
                batch.num_queries());
    const int Hq = batch.heads.num_qo_heads, D = batch.heads.head_dim;
    return {QueryRows::contiguous(q.ptr, batch.q_dtype, B, Hq, D), OutputRows::contiguous(out.ptr, batch.q_dtype, B, Hq, D),
            LseRows::contiguous(static_cast<float*>(lse.ptr), B, Hq), LseBase::e,
            batch.sinks.empty() ? nullptr : static_cast<const float*>(sinks.ptr)};
  }
};

CudaBench::CudaBench(const Batch& batch, L2Flush flush) : impl_(std::make_unique<Impl>(batch, flush)) {}
CudaBench::~CudaBench() = default;

std::string CudaBench::device_name() const {
  return cuda_device_info(impl_->batch.heads, impl_->batch.dtype).name;
}

Measured CudaBench::run(const Plan& plan, const ReferenceResult& ref, int reps, const char* label) {
  Impl& s = *impl_;
  DeviceBuffer workspace(cuda_workspace_bytes(plan));
  const std::span<std::byte> ws(workspace.bytes(), cuda_workspace_bytes(plan));
  cuda_upload_plan(plan, ws, s.stream);
  const AttentionIO io = s.io(s.batch.num_queries());
  const std::size_t rows = std::size_t(s.batch.num_queries()) * s.batch.heads.num_qo_heads;
  const std::size_t out_elems = rows * s.batch.heads.head_dim;

  // Checked run: outputs poisoned first (0xFF bytes are NaN in fp16, bf16 and fp32).
  CODEC_CUDA_CHECK(cudaMemsetAsync(s.out.ptr, 0xFF, out_elems * dtype_size(s.batch.q_dtype), s.stream));
  CODEC_CUDA_CHECK(cudaMemsetAsync(s.lse.ptr, 0xFF, rows * sizeof(float), s.stream));
  nvtxRangePushA(label);  // `ncu --nvtx --nvtx-include "<label>/"` profiles this run alone
  run_cuda(plan, s.kv(), io, ws, s.stream);
  nvtxRangePop();
  CODEC_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  Measured m;
  std::vector<std::byte> raw(out_elems * dtype_size(s.batch.q_dtype));
  CODEC_CUDA_CHECK(cudaMemcpy(raw.data(), s.out.ptr, raw.size(), cudaMemcpyDeviceToHost));
  m.out = to_floats(raw, s.batch.q_dtype);
  m.lse.resize(rows);
  CODEC_CUDA_CHECK(cudaMemcpy(m.lse.data(), s.lse.ptr, rows * sizeof(float), cudaMemcpyDeviceToHost));
  m.error = compare(m.out.data(), ref.out);
  m.lse_error = compare(m.lse.data(), ref.lse);

  // Host cost of a direct call, what a caller pays per layer outside a graph:
  // the median over calls enqueued back to back (the GPU runs behind).
  std::vector<double> host_us;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run_cuda(plan, s.kv(), io, ws, s.stream);
    host_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  CODEC_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  std::sort(host_us.begin(), host_us.end());
  m.host_us = host_us[host_us.size() / 2];

  m.median_ms = time_graph(plan, ws, reps, CudaStages::all);
  m.partial_ms = time_graph(plan, ws, reps, CudaStages::partial_attention);
  return m;
}

double CudaBench::time(const Plan& plan, int reps, CudaStages stages) {
  DeviceBuffer workspace(cuda_workspace_bytes(plan));
  const std::span<std::byte> ws(workspace.bytes(), cuda_workspace_bytes(plan));
  cuda_upload_plan(plan, ws, impl_->stream);
  return time_graph(plan, ws, reps, stages);
}

double CudaBench::time_graph(const Plan& plan, std::span<std::byte> ws, int reps, CudaStages stages) {
  Impl& s = *impl_;
  const AttentionIO io = s.io(plan.num_requests());
  // One CUDA graph of run_cuda (as a serving engine would replay it).
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CODEC_CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
  try {
    run_cuda(plan, s.kv(), io, ws, s.stream, stages);
  } catch (...) {  // end the capture, or every later call on the stream fails for that reason instead
    if (cudaStreamEndCapture(s.stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    throw;
  }
  CODEC_CUDA_CHECK(cudaStreamEndCapture(s.stream, &graph));
  CODEC_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<double> times;
  constexpr int kWarmup = 5;
  for (int i = 0; i < kWarmup + reps; ++i) {
    if (s.flush_mode == L2Flush::write) CODEC_CUDA_CHECK(cudaMemsetAsync(s.flush.ptr, i & 0xFF, kFlushBytes, s.stream));
    else flush_l2_by_reading(s.flush.ptr, kFlushBytes, static_cast<std::uint32_t*>(s.sink.ptr), s.sms, s.stream);
    CODEC_CUDA_CHECK(cudaEventRecord(s.start, s.stream));
    CODEC_CUDA_CHECK(cudaGraphLaunch(exec, s.stream));
    CODEC_CUDA_CHECK(cudaEventRecord(s.stop, s.stream));
    CODEC_CUDA_CHECK(cudaEventSynchronize(s.stop));
    float ms = 0;
    CODEC_CUDA_CHECK(cudaEventElapsedTime(&ms, s.start, s.stop));
    if (i >= kWarmup) times.push_back(ms);
  }
  CODEC_CUDA_CHECK(cudaGraphExecDestroy(exec));
  CODEC_CUDA_CHECK(cudaGraphDestroy(graph));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace codec::tools
