// CudaStreamPlanner: device block table → pinned host copy → plan in a host
// function → pinned staging → workspace, all in one stream's order.
#include "codec/engine/cuda_stream_planner.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "codec/core/error.hpp"
#include "codec/engine/cuda_check.hpp"
#include "codec/forest/forest.hpp"

namespace codec {

namespace {

// This thread's stream-capture mode relaxed while it lives: allocating and
// freeing pinned memory synchronise, which a capture in progress under the
// default (global) mode would not survive. An engine may first plan, and a
// garbage collector destroy a planner, while a graph is being captured.
class RelaxedCapture {
 public:
  explicit RelaxedCapture(bool check) {
    const cudaError_t err = cudaThreadExchangeStreamCaptureMode(&mode_);
    if (check) CODEC_CUDA_CHECK(err);
    active_ = err == cudaSuccess;
  }
  ~RelaxedCapture() {
    if (active_) cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool active_ = false;
};

}  // namespace

struct CudaStreamPlanner::Impl {
  // What one enqueue asks of its host function. A graph replays the host
  // node with the pointer it captured, so each distinct request keeps its
  // own record for the planner's lifetime (a few: one per batch shape).
  struct Call {
    Impl* impl;
    int rows, cols;
    bool cumulative;
    std::int64_t num_pages;
    bool tokens;  // DeviceQueries::qo_indptr given
    QueryMask mask;
    std::int64_t mask_bytes;
    int window_left;
  };
  using CallKey = std::tuple<int, int, bool, std::int64_t, bool, int, std::int64_t, int>;

  int page_size;
  PlannerOptions options;
  std::unique_ptr<StepPlanner> planner;  // the host function's alone: split counts reused across steps
  int max_rows, max_cols;
  Plan empty;
  PlanArrays empty_arrays;  // empty's: a batch of no requests
  PageTableArrays pages;    // the host function's scratch, its capacity kept across steps
  int device = 0;                   // where it was made: the destructor waits there
  cudaEvent_t enqueued = nullptr;   // after the last enqueue outside capture
  std::int32_t* blocks = nullptr;   // pinned [max_rows, max_cols]
  std::int32_t* lengths = nullptr;  // pinned [max_rows + 1]
  std::int32_t* qo_indptr = nullptr;  // pinned [max_rows + 1]
  std::uint8_t* mask_bits = nullptr;  // pinned [max_mask_bytes]
  std::int64_t max_mask_bytes = 0;
  std::byte* staging = nullptr;     // pinned, the packed plan
  std::size_t plan_bytes = 0;
  std::map<CallKey, std::unique_ptr<Call>> calls;
  mutable std::mutex mutex;  // guards error and stats, which host functions write
  std::optional<std::string> error;
  PlanStats stats;
  Totals totals;

  // Packs into the staging buffer what a run reads, so a step costs its own
  // plan's bytes rather than the capacity's (Plan::pack_into).
  void plan(const Call& c) noexcept {
    const auto start = std::chrono::steady_clock::now();
    const std::span<std::byte> out(staging, plan_bytes);
    PlanStats s;
    try {
      const BlockTable table{blocks, c.rows, c.cols, c.cols, lengths, c.cumulative};
      page_table_from_block_table(table, page_size, c.num_pages, pages);
      if (pages.last_page_len.empty()) {
        Plan::pack_into(empty_arrays, *options.capacity, out);
      } else {
        const PageTable view = pages.view();
        view.validate();
        s = planner->plan_into(derive_forest(view), out, queries_of(c, view.num_requests()));
      }
    } catch (const std::exception& e) {
      Plan::pack_into(empty_arrays, *options.capacity, out);  // fits any capacity: cannot throw
      const std::lock_guard lock(mutex);
      if (!error) error = e.what();
    }
    s.plan_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const std::lock_guard lock(mutex);
    stats = s;
    totals.plans += 1;
    totals.plan_ms += s.plan_ms;
    totals.max_plan_ms = std::max(totals.max_plan_ms, s.plan_ms);
    totals.searches = planner->searches();
  }

  // The step's query tokens over the table's first `requests` rows (those
  // with tokens), the mask's bytes cut to what their matrices take, and the window.
  QueryBatch queries_of(const Call& c, int requests) const {
    QueryBatch q;
    q.window_left = c.window_left;
    if (!c.tokens) return q;
    q.qo_indptr = {qo_indptr, std::size_t(requests) + 1};
    q.mask = c.mask;
    if (c.mask == QueryMask::custom || c.mask == QueryMask::draft) {
      const PageTable view = pages.view();
      std::vector<std::int64_t> kv_len;
      for (int r = 0; r < requests; ++r) kv_len.push_back(view.request_tokens(r));
      QueryBatch{q.qo_indptr, QueryMask::causal, {}}.validate(kv_len);  // the tokens first: they size the mask
      const std::int64_t need = mask_byte_offsets(kv_len, q).back();
      CODEC_CHECK(need <= c.mask_bytes, "the batch's mask takes ", need, " bytes, more than the ", c.mask_bytes,
                  " enqueued");
      q.mask_bits = {mask_bits, std::size_t(need)};
    }
    return q;
  }

  static void CUDART_CB host_function(void* call) {
    const Call& c = *static_cast<const Call*>(call);
    c.impl->plan(c);
  }
};

CudaStreamPlanner::CudaStreamPlanner(const HeadConfig& heads, DType dtype, int page_size,
                                     std::shared_ptr<const CostModel> cost, const PlannerOptions& options, int max_rows,
                                     int max_cols, std::int64_t max_mask_bytes)
    : impl_(std::make_unique<Impl>()) {
  CODEC_CHECK(options.capacity.has_value(), "CudaStreamPlanner: options.capacity must be set (cuda_plan_capacity)");
  CODEC_CHECK(cost != nullptr, "CudaStreamPlanner: cost model must not be null");
  CODEC_CHECK(max_rows >= 1 && max_cols >= 1, "CudaStreamPlanner: max_rows ", max_rows, " and max_cols ", max_cols,
              " must be >= 1");
  CODEC_CHECK(max_rows <= options.capacity->requests, "CudaStreamPlanner: max_rows ", max_rows,
              " exceeds the capacity's ", options.capacity->requests, " requests");
  CODEC_CHECK(max_mask_bytes >= 0 && (max_mask_bytes == 0 || options.capacity->masks), "CudaStreamPlanner: max_mask_bytes ",
              max_mask_bytes, " needs a capacity with masks (a maximum of query tokens)");
  options.validate();
  Impl& s = *impl_;
  s.page_size = page_size, s.options = options;
  s.planner = std::make_unique<StepPlanner>(heads, dtype, std::move(cost), options);
  s.max_rows = max_rows, s.max_cols = max_cols, s.max_mask_bytes = max_mask_bytes;
  s.empty = Plan::empty(heads, dtype, page_size, *options.capacity);
  s.empty_arrays =
      PlanArrays::none(options.capacity->blocks, options.capacity->wide_blocks, options.capacity->tail_tokens > 0);
  s.plan_bytes = s.empty.bytes().size();
  const RelaxedCapture relaxed(true);
  CODEC_CUDA_CHECK(cudaGetDevice(&s.device));
  CODEC_CUDA_CHECK(cudaEventCreateWithFlags(&s.enqueued, cudaEventDisableTiming));
  CODEC_CUDA_CHECK(cudaMallocHost(&s.blocks, sizeof(std::int32_t) * std::size_t(max_rows) * std::size_t(max_cols)));
  CODEC_CUDA_CHECK(cudaMallocHost(&s.lengths, sizeof(std::int32_t) * (std::size_t(max_rows) + 1)));
  CODEC_CUDA_CHECK(cudaMallocHost(&s.qo_indptr, sizeof(std::int32_t) * (std::size_t(max_rows) + 1)));
  if (max_mask_bytes > 0) CODEC_CUDA_CHECK(cudaMallocHost(&s.mask_bits, std::size_t(max_mask_bytes)));
  CODEC_CUDA_CHECK(cudaMallocHost(&s.staging, s.plan_bytes));
  std::memcpy(s.staging, s.empty.bytes().data(), s.plan_bytes);  // bytes a plan leaves unwritten: defined
}

CudaStreamPlanner::~CudaStreamPlanner() {
  if (!impl_) return;
  // Errors here have no one to go to. The last eager enqueue must have run
  // (graphs that captured one must be done: see the header).
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != impl_->device &&
                        cudaSetDevice(impl_->device) == cudaSuccess;
  {
    const RelaxedCapture relaxed(false);
    if (impl_->enqueued) {
      cudaEventSynchronize(impl_->enqueued);
      cudaEventDestroy(impl_->enqueued);
    }
    cudaFreeHost(impl_->blocks);
    cudaFreeHost(impl_->lengths);
    cudaFreeHost(impl_->qo_indptr);
    cudaFreeHost(impl_->mask_bits);
    cudaFreeHost(impl_->staging);
  }
  if (switched) cudaSetDevice(previous);
}

const Plan& CudaStreamPlanner::capacity_plan() const { return impl_->empty; }

void CudaStreamPlanner::enqueue(const BlockTable& table, std::int64_t num_pages, std::span<std::byte> workspace,
                                CudaStream stream, const DeviceQueries& queries) {
  Impl& s = *impl_;
  CODEC_CHECK(table.rows >= 0 && table.rows <= s.max_rows, "CudaStreamPlanner::enqueue: ", table.rows,
              " rows, outside [0, max_rows = ", s.max_rows, "]");
  CODEC_CHECK(table.cols >= 1 && table.cols <= s.max_cols, "CudaStreamPlanner::enqueue: ", table.cols,
              " columns, outside [1, max_cols = ", s.max_cols, "]");
  CODEC_CHECK(table.row_stride >= table.cols, "CudaStreamPlanner::enqueue: row_stride ", table.row_stride,
              " is less than the ", table.cols, " columns");
  CODEC_CHECK(table.rows == 0 || (table.blocks != nullptr && table.seq_lens != nullptr),
              "CudaStreamPlanner::enqueue: blocks and seq_lens must not be null");
  CODEC_CHECK(num_pages >= 1, "CudaStreamPlanner::enqueue: num_pages ", num_pages, " must be >= 1");
  const std::size_t need = cuda_workspace_bytes(*s.options.capacity, s.empty.heads().head_dim);
  CODEC_CHECK(workspace.data() != nullptr && workspace.size() >= need, "CudaStreamPlanner::enqueue: workspace of ",
              workspace.size(), " bytes is smaller than the ", need, " bytes of its capacity");
  const bool tokens = queries.qo_indptr != nullptr;
  const bool bits = queries.mask == QueryMask::custom || queries.mask == QueryMask::draft;
  CODEC_CHECK((!tokens && queries.window_left < 0) || s.options.capacity->masks, "CudaStreamPlanner::enqueue: ",
              tokens ? "query tokens need" : "a sliding window needs", " a capacity with masks (a maximum of query tokens)");
  CODEC_CHECK(queries.window_left >= -1, "CudaStreamPlanner::enqueue: window_left ", queries.window_left,
              " must be >= -1");
  CODEC_CHECK(tokens || (queries.mask == QueryMask::causal && queries.mask_bytes == 0),
              "CudaStreamPlanner::enqueue: a mask needs qo_indptr");
  CODEC_CHECK(bits ? queries.mask_bits != nullptr && queries.mask_bytes >= 1 && queries.mask_bytes <= s.max_mask_bytes
                   : queries.mask_bytes == 0,
              "CudaStreamPlanner::enqueue: mask_bytes ", queries.mask_bytes, bits ? " must be in [1, max_mask_bytes = " +
              std::to_string(s.max_mask_bytes) + "] with mask_bits" : " without a custom or draft mask");
  const Impl::CallKey key{table.rows, table.cols, table.cumulative, num_pages, tokens, int(queries.mask),
                         queries.mask_bytes, queries.window_left};
  auto& call = s.calls[key];
  if (!call)
    call = std::make_unique<Impl::Call>(Impl::Call{&s, table.rows, table.cols, table.cumulative, num_pages, tokens,
                                                   queries.mask, queries.mask_bytes, queries.window_left});
  const std::size_t row = sizeof(std::int32_t) * std::size_t(table.cols);
  if (table.rows > 0) {
    CODEC_CUDA_CHECK(cudaMemcpy2DAsync(s.blocks, row, table.blocks, sizeof(std::int32_t) * table.row_stride, row,
                                       table.rows, cudaMemcpyDeviceToHost, stream));
    CODEC_CUDA_CHECK(cudaMemcpyAsync(s.lengths, table.seq_lens,
                                     sizeof(std::int32_t) * std::size_t(table.rows + (table.cumulative ? 1 : 0)),
                                     cudaMemcpyDeviceToHost, stream));
    if (tokens)
      CODEC_CUDA_CHECK(cudaMemcpyAsync(s.qo_indptr, queries.qo_indptr, sizeof(std::int32_t) * (table.rows + 1),
                                       cudaMemcpyDeviceToHost, stream));
    if (bits)
      CODEC_CUDA_CHECK(cudaMemcpyAsync(s.mask_bits, queries.mask_bits, std::size_t(queries.mask_bytes),
                                       cudaMemcpyDeviceToHost, stream));
  }
  CODEC_CUDA_CHECK(cudaLaunchHostFunc(stream, &Impl::host_function, call.get()));
  CODEC_CUDA_CHECK(cudaMemcpyAsync(workspace.data(), s.staging, s.plan_bytes, cudaMemcpyHostToDevice, stream));
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CODEC_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture == cudaStreamCaptureStatusNone) CODEC_CUDA_CHECK(cudaEventRecord(s.enqueued, stream));
}

std::optional<std::string> CudaStreamPlanner::take_error() {
  const std::lock_guard lock(impl_->mutex);
  return std::exchange(impl_->error, std::nullopt);
}

PlanStats CudaStreamPlanner::last_stats() const {
  const std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

CudaStreamPlanner::Totals CudaStreamPlanner::totals() const {
  const std::lock_guard lock(impl_->mutex);
  return impl_->totals;
}

}  // namespace codec
