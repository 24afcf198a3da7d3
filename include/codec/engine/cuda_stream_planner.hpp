#pragma once
// Planning inside a CUDA stream, for graphs whose batch changes every replay
// (an engine's decode step, captured once per batch size). enqueue() puts
// three operations on the stream: a copy of the step's device block table
// and lengths into pinned host memory, a host function that plans them
// (cudaLaunchHostFunc: a host node when captured), and a copy of the plan
// into the workspace. The calling thread never waits, and each replay of a
// graph that captured them plans that replay's batch. Plans are packed at
// one capacity, so run_cuda takes capacity_plan() for any of them.
//
//   CudaStreamPlanner planner(heads, dtype, page_size, cost, options, max_rows, max_cols);
//   planner.enqueue(device_table, num_pages, workspace, stream);   // once per step (with DeviceQueries:
//                                                                  // several query tokens a request)
//   run_cuda(planner.capacity_plan(), kv, io, workspace, stream);  // every layer
//
// A batch the host function cannot plan (a page id outside the pool, more
// than the capacity holds) runs as the empty plan: every row o = 0, lse =
// −inf; its error waits for take_error(). The host function calls no CUDA
// API, so it may run inside any graph.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "codec/core/dtype.hpp"
#include "codec/core/heads.hpp"
#include "codec/cost/cost_model.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "codec/forest/page_table.hpp"
#include "codec/plan/plan.hpp"
#include "codec/plan/planner.hpp"
#include "codec/plan/queries.hpp"

namespace codec {

// An in-stream step's query tokens (QueryBatch), device pointers: qo_indptr
// [rows + 1] over the block table's rows (null: one token a request) under
// `mask`, and for a custom or draft mask its packed bits, of which the first
// mask_bytes are copied every step (at most the planner's max_mask_bytes;
// the host function takes what the batch's matrices need of them), and a
// sliding window (QueryBatch::window_left; with one token a request too).
// Windows and query tokens need a capacity with masks.
struct DeviceQueries {
  const std::int32_t* qo_indptr = nullptr;
  QueryMask mask = QueryMask::causal;
  const std::uint8_t* mask_bits = nullptr;
  std::int64_t mask_bytes = 0;
  int window_left = -1;
};

class CudaStreamPlanner {
 public:
  // options.capacity must be set (cuda_plan_capacity); device block tables
  // of up to max_rows rows and max_cols columns, and masks of up to
  // max_mask_bytes bytes (DeviceQueries). Allocates its pinned buffers here,
  // also while this thread captures a graph (nothing is enqueued).
  CudaStreamPlanner(const HeadConfig& heads, DType dtype, int page_size, std::shared_ptr<const CostModel> cost,
                    const PlannerOptions& options, int max_rows, int max_cols, std::int64_t max_mask_bytes = 0);
  // Waits for its last enqueue outside capture (pending host functions read
  // this object); it must outlive every graph that captured an enqueue, and
  // their replays. Frees its pinned buffers without invalidating a capture
  // in progress.
  ~CudaStreamPlanner();
  CudaStreamPlanner(const CudaStreamPlanner&) = delete;
  CudaStreamPlanner& operator=(const CudaStreamPlanner&) = delete;

  // The host plan run_cuda takes for every plan enqueue() makes (Plan::empty
  // at the capacity: its sizes are the capacity's, which is all a run reads).
  const Plan& capacity_plan() const;

  // Plans `table` (device pointers; rows <= max_rows, cols <= max_cols) in
  // stream order on `stream` into `workspace` (device, at least
  // cuda_workspace_bytes(capacity) bytes). One stream at a time: the pinned
  // buffers serve one step until its plan has been copied out. run_cuda
  // cannot check what it never sees: q must hold the table's rows (with
  // `queries`, the capacity's: options.capacity->requests, as many as a
  // step's query tokens may be), and the KV pool at least num_pages pages
  // (the host function checks page ids against num_pages, and the query
  // tokens against the capacity).
  void enqueue(const BlockTable& table, std::int64_t num_pages, std::span<std::byte> workspace, CudaStream stream,
               const DeviceQueries& queries = {});

  // The first error a host function met since the last call, cleared.
  std::optional<std::string> take_error();
  // The statistics of the latest plan a host function made, and the host
  // functions' count and time (derive + plan, ms) since construction: the
  // time a stream waits for them. Plans reuse the split counts of the last
  // search while the forest keeps its shape (StepPlanner); `searches` counts
  // those that searched.
  PlanStats last_stats() const;
  struct Totals {
    std::int64_t plans = 0;
    std::int64_t searches = 0;
    double plan_ms = 0;
    double max_plan_ms = 0;
  };
  Totals totals() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace codec
