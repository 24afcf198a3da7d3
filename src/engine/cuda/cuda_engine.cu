// Host side of the CUDA engine: validation, workspace layout, plan upload,
// launch configuration, and the single dispatch from a runtime (head_dim,
// dtype) to one of the 6 kernel configurations.
#include "codec/engine/cuda_engine.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "codec/core/error.hpp"
#include "codec/engine/cuda_check.hpp"
#include "codec/engine/run_checks.hpp"
#include "kernel_traits.cuh"
#include "merge.cuh"
#include "pac.cuh"

namespace codec {

static_assert(std::is_same_v<CudaStream, cudaStream_t>, "CudaStream must be cudaStream_t");
static_assert(sizeof(__half) == sizeof(f16_t) && sizeof(__nv_bfloat16) == sizeof(bf16_t));

namespace {

constexpr std::size_t kPlanAlign = 256;  // the partials after the plan start as cudaMalloc'd memory would
constexpr int kChunkAlign = 16;          // see cuda_planner_options in the header

// The one place a runtime (head_dim, dtype) becomes template arguments:
// f(std::integral_constant<int, D>, std::type_identity<T>) for D ∈ {64, 128,
// 256}, T ∈ {__half, __nv_bfloat16}; anything else is an error.
template <typename F>
decltype(auto) dispatch_config(int head_dim, DType dtype, F&& f) {
  auto with_dim = [&](auto type) -> decltype(auto) {
    switch (head_dim) {
      case 64: return f(std::integral_constant<int, 64>{}, type);
      case 128: return f(std::integral_constant<int, 128>{}, type);
      case 256: return f(std::integral_constant<int, 256>{}, type);
      default: break;
    }
    CODEC_FAIL("CUDA engine: head_dim ", head_dim, " is not supported (64, 128 or 256)");
  };
  switch (dtype) {
    case DType::f16: return with_dim(std::type_identity<__half>{});
    case DType::bf16: return with_dim(std::type_identity<__nv_bfloat16>{});
    case DType::f32: break;
  }
  CODEC_FAIL("CUDA engine: dtype ", to_string(dtype), " is not supported (fp16 or bf16)");
}

std::size_t plan_region_bytes(const Plan& plan) {
  return (plan.bytes().size() + kPlanAlign - 1) / kPlanAlign * kPlanAlign;
}

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

void check_workspace(const Plan& plan, std::span<std::byte> workspace, const char* who) {
  const std::size_t need = cuda_workspace_bytes(plan);
  CODEC_CHECK(workspace.data() != nullptr, who, ": workspace must not be null");
  CODEC_CHECK(aligned(workspace.data(), kPlanAlign), who, ": workspace ", static_cast<const void*>(workspace.data()),
              " is not ", kPlanAlign, "-byte aligned");
  CODEC_CHECK(workspace.size() >= need, who, ": workspace of ", workspace.size(), " bytes is smaller than the ", need,
              " bytes the plan needs (cuda_workspace_bytes)");
}

void validate_run(const Plan& plan, const PagedKV& kv, const CudaAttentionIO& io, std::span<std::byte> workspace) {
  check_plan_and_kv(plan, kv, "run_cuda");
  CODEC_CHECK(kv.dtype == DType::f16 || kv.dtype == DType::bf16, "run_cuda: kv.dtype ", to_string(kv.dtype),
              " is not supported on CUDA (fp16 or bf16)");
  CODEC_CHECK(io.q != nullptr, "run_cuda: io.q must not be null");
  CODEC_CHECK(io.out != nullptr, "run_cuda: io.out must not be null");
  // cp.async moves 16-byte chunks: every row start must be 16-byte aligned.
  const std::pair<const void*, const char*> pointers[] = {{kv.k, "kv.k"}, {kv.v, "kv.v"}, {io.q, "io.q"},
                                                          {io.out, "io.out"}};
  for (const auto& [ptr, name] : pointers)
    CODEC_CHECK(aligned(ptr, 16), "run_cuda: ", name, " ", ptr, " is not 16-byte aligned");
  CODEC_CHECK(aligned(io.lse, alignof(float)), "run_cuda: io.lse ", static_cast<const void*>(io.lse),
              " is not 4-byte aligned");
  const std::int64_t elem = std::int64_t(dtype_size(kv.dtype));
  const std::pair<std::int64_t, const char*> strides[] = {
      {kv.stride_page, "kv.stride_page"}, {kv.stride_token, "kv.stride_token"}, {kv.stride_head, "kv.stride_head"}};
  for (const auto& [stride, name] : strides)
    CODEC_CHECK(stride * elem % 16 == 0, "run_cuda: ", name, " ", stride, " elements (", stride * elem,
                " bytes) is not a multiple of 16 bytes");
  CODEC_CHECK(plan.extent().max_task_rows <= kCudaMaxTileRows, "run_cuda: a plan task has ",
              plan.extent().max_task_rows, " query rows, more than the kernel's ", kCudaMaxTileRows,
              " (plan with cuda_planner_options or max_tile_rows <= ", kCudaMaxTileRows, ")");
  check_workspace(plan, workspace, "run_cuda");  // last: tests rely on it to stop any case that slips through
}

}  // namespace

int cuda_device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error for the caller, clear it
    return 0;
  }
  return count;
}

CudaDeviceInfo cuda_device_info(const HeadConfig& heads, DType dtype) {
  CudaDeviceInfo info;
  // dispatch first: an unsupported configuration is reported as such, GPU or not
  info.blocks_per_sm = dispatch_config(heads.head_dim, dtype, [](auto dim, auto type) {
    return cuda::pac_blocks_per_sm<decltype(dim)::value, typename decltype(type)::type>();
  });
  CODEC_CUDA_CHECK(cudaGetDevice(&info.device));
  cudaDeviceProp prop{};
  CODEC_CUDA_CHECK(cudaGetDeviceProperties(&prop, info.device));
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  CODEC_CHECK(info.blocks_per_sm >= 1, "PAC kernel for head_dim ", heads.head_dim, " ", to_string(dtype),
              " cannot be resident on ", info.name);
  return info;
}

PlannerOptions cuda_planner_options(const HeadConfig& heads, DType dtype) {
  const CudaDeviceInfo info = cuda_device_info(heads, dtype);
  PlannerOptions options;
  options.num_blocks = info.sm_count * info.blocks_per_sm;
  options.max_tile_rows = kCudaMaxTileRows;
  options.chunk_align = kChunkAlign;
  return options;
}

std::size_t cuda_workspace_bytes(const Plan& plan) { return plan_region_bytes(plan) + plan.workspace().bytes; }

void cuda_upload_plan(const Plan& plan, std::span<std::byte> workspace, CudaStream stream) {
  check_workspace(plan, workspace, "cuda_upload_plan");
  const std::span<const std::byte> bytes = plan.bytes();
  if (!bytes.empty())
    CODEC_CUDA_CHECK(
        cudaMemcpyAsync(workspace.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream));
}

void run_cuda(const Plan& plan, const PagedKV& kv, const CudaAttentionIO& io, std::span<std::byte> workspace,
              CudaStream stream, CudaStages stages) {
  validate_run(plan, kv, io, workspace);
  const PlanView device = plan.view(workspace.data());
  const WorkspaceLayout layout = plan.workspace();
  std::byte* partials = workspace.data() + plan_region_bytes(plan);
  float* part_o = reinterpret_cast<float*>(partials + layout.o_offset);
  float* part_lse = reinterpret_cast<float*>(partials + layout.lse_offset);
  // The merge is needed unless every row was written by its single PAC task.
  const bool merge = plan.extent().needs_merge && stages == CudaStages::all;
  // Programmatic dependent launch of the merge (merge.cuh) needs sm_90. Querying
  // the device is not a stream operation, so it is allowed during graph capture.
  bool programmatic = false;
  if (merge) {
    int device = 0, major = 0;
    CODEC_CUDA_CHECK(cudaGetDevice(&device));
    CODEC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    programmatic = major >= 9;
  }

  dispatch_config(kv.head_dim, kv.dtype, [&](auto dim, auto type) {
    constexpr int D = decltype(dim)::value;
    using T = typename decltype(type)::type;
    static_assert(cuda::PacTraits<D, T>::kMaxRows == kCudaMaxTileRows);
    cuda::launch_pac<D, T>({.plan = device,
                            .k = kv.k,
                            .v = kv.v,
                            .stride_page = kv.stride_page,
                            .stride_token = kv.stride_token,
                            .stride_head = kv.stride_head,
                            .q = io.q,
                            .out = io.out,
                            .lse = io.lse,
                            .part_o = part_o,
                            .part_lse = part_lse,
                            .sm_scale = plan.heads().scale()},
                           stream);
    if (merge)
      cuda::launch_merge<D, T>({.plan = device,
                                .part_o = part_o,
                                .part_lse = part_lse,
                                .out = io.out,
                                .lse = io.lse,
                                .warps_per_row = cuda::merge_warps_per_row<D>(plan.extent().max_partials)},
                               programmatic, stream);
  });
}

}  // namespace codec
