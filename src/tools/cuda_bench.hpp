#pragma once
// GPU timing for `codec bench --backend cuda` (built only with the CUDA engine).
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "codec/engine/cuda_engine.hpp"
#include "codec/engine/reference.hpp"
#include "codec/plan/plan.hpp"
#include "workload/workload.hpp"
#include "measured.hpp"

namespace codec::tools {

// How L2 is emptied before each timed run: by a memset of a buffer several
// times its size (its lines left dirty, written back while the run reads) or
// by a read of it (left clean).
enum class L2Flush { write, read };

// Device copies of one batch, shared by the runs of every plan over it.
class CudaBench {
 public:
  CudaBench(const Batch& batch, L2Flush flush);
  ~CudaBench();
  CudaBench(const CudaBench&) = delete;
  CudaBench& operator=(const CudaBench&) = delete;

  // Uploads the plan, checks one poisoned run against the reference, then
  // times `reps` replays of a CUDA graph of run_cuda, each after flushing L2,
  // with CUDA events around the attention alone (docs/BENCHMARKS.md protocol).
  // The checked run sits in an NVTX range named `label`, for ncu. The same
  // replays of the partial attention alone give the merge's share of the time,
  // and `reps` direct calls the host time of one run_cuda call.
  Measured run(const Plan& plan, const ReferenceResult& ref, int reps, const char* label);
  // Median time of `reps` graph replays of a plan over this batch, unchecked
  // (the plan may use any subset of the batch's pages and requests), of the
  // whole run or its partial attention alone.
  double time(const Plan& plan, int reps, CudaStages stages = CudaStages::all);
  std::string device_name() const;

 private:
  double time_graph(const Plan& plan, std::span<std::byte> workspace, int reps, CudaStages stages);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace codec::tools
