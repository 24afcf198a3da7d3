#pragma once
// Plans and the planner as the bindings hold them: a plan with the engine it
// runs on, and one wrapper's planner (the library's planner setup, fixed for
// its shape and workspace; page tables in, plans out). Its methods that touch
// a device (upload, the stream planner) are ops.cpp's.
#include <nanobind/nanobind.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings/tensors.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "codec/engine/cuda_stream_planner.hpp"
#include "codec/engine/planner_setup.hpp"
#include "codec/plan/plan.hpp"

namespace codec::bindings {

struct PyPlan {
  Plan plan;
  Engine engine;
  DType q_dtype;  // q's and out's: the plan's (KV) dtype, or under an fp8 cache the planner's q dtype
};

nb::dict stats_of(const PlanStats& s);
// A mask by its Python name: "none", "causal", "custom" or "draft".
QueryMask query_mask(const std::string& name);

class Planner {
 public:
  // engine "cpu" or "cuda"; dtype by its Python name; max_requests > 0 packs
  // every plan at one capacity (CUDA-graph mode), of up to max_query_tokens
  // query tokens (0: one a request) and max_mask_bytes of mask. cost_table: "" for the
  // measured table of the device where one is found (in cost_table_dirs,
  // then the library's), else the roofline; "roofline"; or a table's file.
  // dtype: the KV cache's; q_dtype: the queries' ("": dtype's; under an fp8 cache float16, bfloat16 or float32).
  Planner(const std::string& engine, int device, int num_qo_heads, int num_kv_heads, int head_dim, int page_size,
          const std::string& dtype, float sm_scale, std::size_t workspace_bytes, int max_requests,
          std::int64_t max_page_entries, int num_threads, const std::string& cost_table,
          const std::vector<std::string>& cost_table_dirs, int max_query_tokens, std::int64_t max_mask_bytes,
          const std::string& q_dtype, float logits_soft_cap);

  // qo_indptr: several query tokens a request (QueryBatch), under `mask`
  // ("none", "causal", "custom" or "draft", with mask_bits packed as
  // FlashInfer packs them); None: one token each.
  std::unique_ptr<PyPlan> plan(const HostInts& indptr, const HostInts& indices, const HostInts& last_page_len,
                               std::int64_t num_pages, const std::optional<HostInts>& qo_indptr,
                               const std::string& mask, const std::optional<HostBytes>& mask_bits,
                               int window_left) const;
  // Writes the plan into the workspace on `stream` (CUDA); the CPU engine reads the host plan.
  void upload(const PyPlan& p, const Writable& workspace, std::uintptr_t stream);
  // Plans a device block table in stream order (CudaStreamPlanner): the plan
  // reaches the workspace when the stream gets there, and a CUDA graph
  // capturing this re-plans each replay's batch; run it with capacity_plan().
  // qo_indptr (device, int32 [rows + 1]): several query tokens a request
  // under `mask` (as plan's), a custom or draft mask's packed bits in
  // mask_bits (device uint8, up to the wrapper's max_mask_bytes, copied
  // whole every step); window_left: a sliding window (QueryBatch::window_left).
  void stream_plan(const Array& block_table, const Array& seq_lens, bool cumulative, std::int64_t num_pages,
                   const Writable& workspace, std::uintptr_t stream, const std::optional<Array>& qo_indptr,
                   int window_left, const std::string& mask, const std::optional<Array>& mask_bits);
  // The plan run takes for every stream_plan (its sizes are the capacity's).
  std::unique_ptr<PyPlan> capacity_plan() const;
  // The first error a stream plan met since the last call (its batch ran as the empty plan), or None.
  std::optional<std::string> take_stream_error();
  nb::dict stream_stats() const;

  std::string describe() const;
  int num_blocks() const { return setup_.options.num_blocks; }
  std::int64_t capacity_slots() const { return setup_.options.capacity ? setup_.options.capacity->slots : 0; }
  const std::string& device_name() const { return setup_.device; }
  const std::string& cost_table() const { return setup_.cost_table; }

 private:
  Engine engine_;
  PlannerSetup setup_;
  std::unique_ptr<CudaPlanStaging> staging_;   // CUDA: made with the planner
  std::unique_ptr<CudaStreamPlanner> stream_;  // made by the first stream_plan
};

void bind_planning(nb::module_& m);
void bind_ops(nb::module_& m);

}  // namespace codec::bindings
