#pragma once
// The kernels' host entry points as cuda_engine.cu sees them: their
// parameters, and one struct of static functions per kernel configuration,
// declared here and defined beside each kernel (pac.cuh, pac_wide.cuh,
// merge.cuh). The files of instances/ instantiate the configurations a few
// to a translation unit, so that a build compiles them in parallel and the
// engine's own file holds no kernel.
#include <cuda_runtime_api.h>

#include <atomic>

#include "codec/engine/attention_io.hpp"
#include "codec/engine/cuda_check.hpp"
#include "codec/plan/plan.hpp"
#include "engine/cuda/kernel_traits.cuh"
#include "engine/cuda/tile/kv_loader.cuh"

namespace codec::cuda {

// A yes-or-no property of the current device, computed once per device
// (`answer()` on it) and cached for the first 64: run_cuda asks on every
// call. A device query, not a stream operation, so allowed during capture.
class PerDeviceAnswer {
 public:
  template <typename F>
  bool get(F&& answer) {
    int device = 0;
    CODEC_CUDA_CHECK(cudaGetDevice(&device));
    if (device < kCachedDevices && known_[device].load(std::memory_order_acquire) != 0)
      return known_[device].load(std::memory_order_acquire) == 2;
    const bool yes = answer();
    if (device < kCachedDevices) known_[device].store(yes ? 2 : 1, std::memory_order_release);
    return yes;
  }

 private:
  static constexpr int kCachedDevices = 64;
  std::atomic<int> known_[kCachedDevices] = {};  // 0 unknown, 1 no, 2 yes
};

struct PacParams {
  PlanView plan;               // views the plan copy at the head of the workspace
  KvPool kv;
  const void* q;               // row (request, qo head) at q_rows.at(request, head), D elements, KV dtype
  RowStrides q_rows;           //   (each row start 16-byte aligned)
  void* out;                   // likewise, KV dtype: rows whose request has a single partial
  RowStrides out_rows;
  float* lse;                  // lse of (request, qo head) at lse_rows.at(request, head), or null
  RowStrides lse_rows;
  float lse_scale;             // 1 (natural log) or log2(e) (base 2)
  float* part_o;               // [slots, D] fp32 normalised partial outputs
  float* part_lse;             // [slots] fp32 natural log
  float sm_scale;
  float soft_cap;              // HeadConfig::logits_soft_cap (0: none; Variant::soft_cap otherwise)
  KvScale k_scale, v_scale;    // an fp8 cache's scales in device memory (PagedKV), or none
  const float* sinks;          // [Hq] attention sinks (AttentionIO::sinks), or null
  bool fp8_e5m2;               // an fp8 cache's format: e5m2, else e4m3
};

struct MergeParams {
  PlanView plan;          // views the plan copy at the head of the workspace
  const float* part_o;    // [slots, D] fp32 normalised partial outputs
  const float* part_lse;  // [slots] fp32 natural log
  void* out;              // row (request, qo head) at out_rows.at(request, head), KV dtype
  RowStrides out_rows;
  float* lse;             // lse of (request, qo head) at lse_rows.at(request, head), or null
  RowStrides lse_rows;
  float lse_scale;        // 1 (natural log) or log2(e) (base 2)
  const float* sinks;     // [Hq] attention sinks (AttentionIO::sinks), or null
  int warps_per_row = 1;  // 1, 2 or 4 (merge_warps_per_row)
};

// The PAC kernel (pac.cuh) of one configuration: head_dim D, q dtype T, an
// fp8 cache or one of T. A run's RunVariant picks one of its 4 instances.
template <int D, typename T, bool kFp8>
struct PacKernels {
  // Whether this build holds a kernel image the current device can run.
  static bool has_image();
  // Resident blocks per SM on the current device (registers and shared
  // memory); every variant has the same launch bounds and shared memory.
  static int blocks_per_sm();
  // One block per plan block. `programmatic`: a dependent launch of the wide
  // kernel just launched on the stream (pac_wide.cuh), sm_90 only.
  static void launch(const PacParams& params, RunVariant variant, bool programmatic, cudaStream_t stream);
};

// The wide kernel (pac_wide.cuh; head_dim 64 or 128, code in sm_90a builds
// only): one block per wide block of the plan.
template <int D, typename T, bool kFp8>
struct WideKernels {
  static void launch(const PacParams& params, RunVariant variant, cudaStream_t stream);
};

// The merge (merge.cuh), launched as a programmatic dependent of the previous
// kernel on the stream (PAC, or the wide kernel) where the device and the
// merge's code are sm_90's; stream capture records that as a programmatic
// graph edge.
template <int D, typename T>
struct MergeKernels {
  static void launch(const MergeParams& params, cudaStream_t stream);
};

// Warps per row for a plan whose longest row merges max_partials partials:
// one while a warp's round holds them, else 2 or 4 (fewer rows per block).
template <int D>
int merge_warps_per_row(int max_partials) {
  using Tr = MergeTraits<D>;
  return max_partials <= Tr::kBatch ? 1 : max_partials <= 2 * Tr::kBatch ? 2 : Tr::kWarps;
}

}  // namespace codec::cuda
