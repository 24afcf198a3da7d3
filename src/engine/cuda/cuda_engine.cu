// Host side of the CUDA engine: validation, workspace layout, plan upload,
// launch configuration, and the single dispatch from a runtime (head_dim, q
// dtype, KV dtype) to one of the 12 kernel configurations, whose launchers
// (kernels/launch.cuh) take the run's plan and heads as a cuda::RunVariant.
// This file holds no kernel: instances/ compiles them.
#include "codec/engine/cuda_engine.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>

#include "codec/core/error.hpp"
#include "codec/engine/cuda_check.hpp"
#include "engine/cuda_layout.hpp"
#include "engine/run_checks.hpp"
#include "engine/cuda/kernel_traits.cuh"
#include "engine/cuda/kernels/launch.cuh"

namespace codec {

static_assert(std::is_same_v<CudaStream, cudaStream_t>, "CudaStream must be cudaStream_t");
static_assert(sizeof(__half) == sizeof(f16_t) && sizeof(__nv_bfloat16) == sizeof(bf16_t));

namespace {

// The one place a runtime (head_dim, q dtype, KV dtype) becomes template
// arguments: f(std::integral_constant<int, D>, std::type_identity<T>,
// std::bool_constant<kFp8>) for D ∈ {64, 128, 256}, T ∈ {__half,
// __nv_bfloat16} (q's and the output's) and kFp8 whether the cache is fp8
// (e4m3 or e5m2, told apart at run time; else T); anything else is an error.
template <typename F>
decltype(auto) dispatch_config(int head_dim, DType q_dtype, DType kv_dtype, F&& f) {
  CODEC_CHECK(kv_dtype == q_dtype || is_fp8(kv_dtype), "CUDA engine: KV dtype ", to_string(kv_dtype),
              " under q of ", to_string(q_dtype), " (q and KV share one dtype but under an fp8 cache)");
  auto with_dim = [&](auto type) -> decltype(auto) {
    auto with_cache = [&](auto dim) -> decltype(auto) {
      if (is_fp8(kv_dtype)) return f(dim, type, std::true_type{});
      return f(dim, type, std::false_type{});
    };
    switch (head_dim) {
      case 64: return with_cache(std::integral_constant<int, 64>{});
      case 128: return with_cache(std::integral_constant<int, 128>{});
      case 256: return with_cache(std::integral_constant<int, 256>{});
      default: break;
    }
    CODEC_FAIL("CUDA engine: head_dim ", head_dim, " is not supported (64, 128 or 256)");
  };
  switch (q_dtype) {
    case DType::f16: return with_dim(std::type_identity<__half>{});
    case DType::bf16: return with_dim(std::type_identity<__nv_bfloat16>{});
    case DType::f32:
    case DType::e4m3:
    case DType::e5m2: break;
  }
  CODEC_FAIL("CUDA engine: dtype ", to_string(q_dtype), " is not supported (fp16 or bf16, or an fp8 cache under "
             "either)");
}

// The q dtype the CUDA engine pairs with a KV dtype where only the KV's is
// known (planning, device queries): an fp8 cache's bf16 (fp16 would need
// the same resources).
DType q_dtype_of(DType kv_dtype) { return is_fp8(kv_dtype) ? DType::bf16 : kv_dtype; }

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// The wide kernel has code only in sm_90a builds and runs only on sm_90.
bool built_for_sm90a() { return std::strstr(CODEC_CUDA_ARCHITECTURES, "90a") != nullptr; }

// Whether the current device runs the wide kernel.
bool wide_runs_here() {
  static cuda::PerDeviceAnswer cached;
  return cached.get([] {
    int device = 0, major = 0, minor = 0;
    CODEC_CUDA_CHECK(cudaGetDevice(&device));
    CODEC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CODEC_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    return built_for_sm90a() && major == 9 && minor == 0;
  });
}

void check_workspace(const Plan& plan, std::span<std::byte> workspace, const char* who) {
  const std::size_t need = cuda_workspace_bytes(plan);
  CODEC_CHECK(workspace.data() != nullptr, who, ": workspace must not be null");
  CODEC_CHECK(aligned(workspace.data(), kCudaPlanAlign), who, ": workspace ", static_cast<const void*>(workspace.data()),
              " is not ", kCudaPlanAlign, "-byte aligned");
  CODEC_CHECK(workspace.size() >= need, who, ": workspace of ", workspace.size(), " bytes is smaller than the ", need,
              " bytes the plan needs (cuda_workspace_bytes)");
}

void validate_run(const Plan& plan, const PagedKV& kv, const AttentionIO& io, std::span<std::byte> workspace) {
  check_plan_and_kv(plan, kv, "run_cuda");
  CODEC_CHECK(kv.dtype != DType::f32, "run_cuda: kv.dtype fp32 is not supported on CUDA (fp16, bf16 or fp8)");
  CODEC_CHECK(is_fp8(kv.dtype) || (kv.k_scale.count == 0 && kv.v_scale.count == 0), "run_cuda: k_scale and "
              "v_scale go with an fp8 cache on CUDA, not a ", to_string(kv.dtype), " one (fold a 16-bit cache's "
              "scales into sm_scale and the output)");
  check_io(plan, io, /*out_f32=*/false, "run_cuda");
  // cp.async moves 16-byte chunks: every row start must be 16-byte aligned.
  const std::pair<const void*, const char*> pointers[] = {{kv.k, "kv.k"}, {kv.v, "kv.v"}, {io.q.data, "q"},
                                                          {io.out.data, "out"}};
  for (const auto& [ptr, name] : pointers)
    CODEC_CHECK(aligned(ptr, 16), "run_cuda: ", name, " ", ptr, " is not 16-byte aligned");
  // The scales and the sinks are device memory, read as they are: their values are not checked here.
  const std::pair<const float*, const char*> floats[] = {
      {io.lse.data, "lse"}, {io.sinks, "sinks"}, {kv.k_scale.data, "kv.k_scale"}, {kv.v_scale.data, "kv.v_scale"}};
  for (const auto& [ptr, name] : floats)
    CODEC_CHECK(aligned(ptr, alignof(float)), "run_cuda: ", name, " ", static_cast<const void*>(ptr),
                " is not 4-byte aligned");
  const std::int64_t kv_elem = std::int64_t(dtype_size(kv.dtype)), q_elem = std::int64_t(dtype_size(io.q.dtype));
  const std::tuple<std::int64_t, std::int64_t, const char*> strides[] = {
      {kv.stride_page, kv_elem, "kv.stride_page"},     {kv.stride_token, kv_elem, "kv.stride_token"},
      {kv.stride_head, kv_elem, "kv.stride_head"},     {io.q.stride_batch, q_elem, "q.stride_batch"},
      {io.q.stride_head, q_elem, "q.stride_head"},     {io.out.stride_batch, q_elem, "out.stride_batch"},
      {io.out.stride_head, q_elem, "out.stride_head"}};
  for (const auto& [stride, elem, name] : strides)
    CODEC_CHECK(stride * elem % 16 == 0, "run_cuda: ", name, " ", stride, " elements (", stride * elem,
                " bytes) is not a multiple of 16 bytes");
  CODEC_CHECK(plan.extent().max_task_rows <= kCudaMaxTileRows, "run_cuda: a plan task has ",
              plan.extent().max_task_rows, " query rows, more than the kernel's ", kCudaMaxTileRows,
              " (plan with cuda_planner_options or max_tile_rows <= ", kCudaMaxTileRows, ")");
  if (plan.view().num_wide_blocks > 0) {
    CODEC_CHECK(cuda_wide_head_dim(kv.head_dim) && wide_runs_here(), "run_cuda: the plan has wide blocks, which run "
                "at head_dim 64 or 128 on sm_90 devices with a build for sm_90a only (head_dim ", kv.head_dim,
                ", build for ",
                CODEC_CUDA_ARCHITECTURES, "): plan with cuda_planner_options");
    CODEC_CHECK(plan.extent().max_wide_rows <= kCudaMaxWideRows, "run_cuda: a wide task has ",
                plan.extent().max_wide_rows, " query rows, more than the wide kernel's ", kCudaMaxWideRows);
  }
  check_workspace(plan, workspace, "run_cuda");  // last: tests rely on it to stop any case that slips through
}

// The kernels' view of the pool (tile/kv_loader.cuh): token offsets in 32-bit
// units of the largest power of two that divides both strides in bytes.
// Unpadded NHD, HND and interleaved pools have both strides multiples of a
// token row (128 bytes or more here), so they reach 512 GiB or more; a pool
// whose last token lies beyond 2^32 units is refused.
cuda::KvPool make_kv_pool(const PagedKV& kv) {
  const std::int64_t elem = std::int64_t(dtype_size(kv.dtype));
  const std::int64_t page = kv.stride_page * elem, token = kv.stride_token * elem;  // multiples of 16 (validate_run)
  std::int64_t unit = std::int64_t(1) << 30;
  for (const std::int64_t stride : {page, token})
    if (stride > 0) unit = std::min(unit, stride & -stride);
  constexpr std::int64_t kMaxUnits = std::numeric_limits<std::uint32_t>::max();
  const std::int64_t page_units = page / unit, token_units = token / unit;
  const bool fits = page_units <= kMaxUnits && token_units <= kMaxUnits &&
                    (page_units == 0 || kv.num_pages - 1 <= kMaxUnits / page_units) &&
                    (kv.num_pages - 1) * page_units + std::int64_t(kv.page_size - 1) * token_units <= kMaxUnits;
  CODEC_CHECK(fits, "run_cuda: the KV pool of ", kv.num_pages, " pages (kv.stride_page ", kv.stride_page,
              ", kv.stride_token ", kv.stride_token, " elements) spans more than 2^32 units of ", unit,
              " bytes, the most the kernels address; strides with more factors of two reach further");
  return {kv.k, kv.v, kv.stride_page, kv.stride_token, kv.stride_head, std::uint32_t(page_units),
          std::uint32_t(token_units), std::uint32_t(unit)};
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

const char* cuda_built_architectures() { return CODEC_CUDA_ARCHITECTURES; }

CudaDeviceInfo cuda_device_info(const HeadConfig& heads, DType dtype) {
  CudaDeviceInfo info;
  // an unsupported configuration is reported as such, GPU or not
  const auto has_image = dispatch_config(heads.head_dim, q_dtype_of(dtype), dtype, [](auto dim, auto type, auto fp8) {
    return &cuda::PacKernels<decltype(dim)::value, typename decltype(type)::type, decltype(fp8)::value>::has_image;
  });
  CODEC_CUDA_CHECK(cudaGetDevice(&info.device));
  cudaDeviceProp prop{};
  CODEC_CUDA_CHECK(cudaGetDeviceProperties(&prop, info.device));
  info.name = prop.name;
  info.compute_capability = 10 * prop.major + prop.minor;
  info.sm_count = prop.multiProcessorCount;
  // Without a kernel image for the device a launch would fail deep inside a
  // run; say so here, where plans are made.
  CODEC_CHECK(has_image(), "CUDA device ", info.device, " (", info.name, ") is sm_", info.compute_capability,
              ", but this CoDec build has kernels for CUDA architectures ", cuda_built_architectures(),
              " only: rebuild with -DCMAKE_CUDA_ARCHITECTURES=", info.compute_capability,
              info.compute_capability == 90 ? "a" : "", "-real");
  info.blocks_per_sm = dispatch_config(heads.head_dim, q_dtype_of(dtype), dtype, [](auto dim, auto type, auto fp8) {
    return cuda::PacKernels<decltype(dim)::value, typename decltype(type)::type, decltype(fp8)::value>::blocks_per_sm();
  });
  CODEC_CHECK(info.blocks_per_sm >= 1, "PAC kernel for head_dim ", heads.head_dim, " ", to_string(dtype),
              " cannot be resident on ", info.name);
  info.wide = cuda_wide_head_dim(heads.head_dim) && info.blocks_per_sm == cuda_pac_min_blocks_per_sm(heads.head_dim) &&
              wide_runs_here();
  return info;
}

std::string cuda_device_name(int device) {
  cudaDeviceProp prop{};
  CODEC_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

CudaDeviceScope::CudaDeviceScope(int device) {
  CODEC_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) CODEC_CUDA_CHECK(cudaSetDevice(device));
  else previous_ = -1;
}

CudaDeviceScope::~CudaDeviceScope() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

PlannerOptions cuda_planner_options(const HeadConfig& heads, DType dtype) {
  const CudaDeviceInfo info = cuda_device_info(heads, dtype);
  return cuda_planner_options(heads, info.sm_count, info.blocks_per_sm, info.wide);
}

void cuda_upload_plan(const Plan& plan, std::span<std::byte> workspace, CudaStream stream) {
  check_workspace(plan, workspace, "cuda_upload_plan");
  const std::span<const std::byte> bytes = plan.bytes();
  CODEC_CUDA_CHECK(cudaMemcpyAsync(workspace.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream));
}

struct CudaPlanStaging::Impl {
  struct Buffer {
    void* host = nullptr;  // pinned
    std::size_t bytes = 0;
    cudaEvent_t copied = nullptr;  // recorded after the copy out of it
  };
  Buffer buffers[2];
  int next = 0;
  int device = -1;

  ~Impl() {
    for (Buffer& b : buffers) {
      if (b.copied) cudaEventDestroy(b.copied);
      if (b.host) cudaFreeHost(b.host);
    }
  }
};

CudaPlanStaging::CudaPlanStaging() : impl_(std::make_unique<Impl>()) {}
CudaPlanStaging::~CudaPlanStaging() = default;

void CudaPlanStaging::upload(const Plan& plan, std::span<std::byte> workspace, CudaStream stream) {
  check_workspace(plan, workspace, "CudaPlanStaging::upload");
  Impl& s = *impl_;
  int device = 0;
  CODEC_CUDA_CHECK(cudaGetDevice(&device));
  CODEC_CHECK(s.device < 0 || s.device == device, "CudaPlanStaging::upload: called on device ", device,
              " after device ", s.device, " (one staging per device)");
  s.device = device;
  Impl::Buffer& b = s.buffers[s.next];
  s.next ^= 1;
  const std::span<const std::byte> bytes = plan.bytes();
  if (b.copied) CODEC_CUDA_CHECK(cudaEventSynchronize(b.copied));  // its previous copy has left it
  if (b.bytes < bytes.size()) {
    if (b.host) CODEC_CUDA_CHECK(cudaFreeHost(b.host));
    b.host = nullptr;
    b.bytes = 0;
    CODEC_CUDA_CHECK(cudaMallocHost(&b.host, bytes.size()));
    b.bytes = bytes.size();
  }
  if (!b.copied) CODEC_CUDA_CHECK(cudaEventCreateWithFlags(&b.copied, cudaEventDisableTiming));
  std::memcpy(b.host, bytes.data(), bytes.size());
  CODEC_CUDA_CHECK(cudaMemcpyAsync(workspace.data(), b.host, bytes.size(), cudaMemcpyHostToDevice, stream));
  CODEC_CUDA_CHECK(cudaEventRecord(b.copied, stream));
}

// With wide blocks the wide kernel goes first and the PAC kernel is its
// programmatic dependent (kernels/pac_wide.cuh). A plan of wide tasks alone
// (sysprompt:B, its tails taken in) launches no PAC kernel: its blocks would
// only wait for the wide grid, and the merge, launched once they had all
// exited, would start late. The merge waits for the wide grid itself instead,
// launched at the wide kernel's start and waiting on the SMs no wide block
// holds (sysprompt:64-256 0.85-0.90×: 8d33c3f; docs/DESIGN_NOTES.md, Launches).
CudaLaunches cuda_launches(const Plan& plan, CudaStages stages) {
  CudaLaunches l;
  l.wide = plan.view().num_wide_blocks > 0;
  l.pac = !l.wide || plan.extent().max_task_rows > 0 || plan.has_capacity();
  l.merge = plan.extent().needs_merge && stages == CudaStages::all;
  return l;
}

void run_cuda(const Plan& plan, const PagedKV& kv, const AttentionIO& io, std::span<std::byte> workspace,
              CudaStream stream, CudaStages stages) {
  validate_run(plan, kv, io, workspace);
  const cuda::KvPool pool = make_kv_pool(kv);
  PlanView device = plan.view(workspace.data());
  device.num_requests = io.out.batch;  // the rows this run writes (AttentionIO)
  const WorkspaceLayout layout = plan.workspace();
  std::byte* partials = workspace.data() + cuda_plan_region_bytes(plan.bytes().size());
  float* part_o = reinterpret_cast<float*>(partials + layout.o_offset);
  float* part_lse = reinterpret_cast<float*>(partials + layout.lse_offset);
  const CudaLaunches launches = cuda_launches(plan, stages);
  const float lse_scale = codec::lse_scale(io.lse_base);
  // The kernels' masked instances (tile/row_masks.cuh): for a plan with
  // masked tasks, and at a capacity with masks for any plan uploaded later.
  const bool masked = plan.extent().masked_tasks > 0 || (plan.has_capacity() && plan.masks());

  const float soft_cap = plan.heads().logits_soft_cap;

  dispatch_config(kv.head_dim, io.q.dtype, kv.dtype, [&](auto dim, auto type, auto fp8) {
    constexpr int D = decltype(dim)::value;
    using T = typename decltype(type)::type;
    constexpr bool kFp8 = decltype(fp8)::value;
    static_assert(cuda::PacTraits<D, T>::kMaxRows == kCudaMaxTileRows);
    const cuda::PacParams params{.plan = device,
                                 .kv = pool,
                                 .q = io.q.data,
                                 .q_rows = io.q.strides(),
                                 .out = io.out.data,
                                 .out_rows = io.out.strides(),
                                 .lse = io.lse.data,
                                 .lse_rows = io.lse.strides(),
                                 .lse_scale = lse_scale,
                                 .part_o = part_o,
                                 .part_lse = part_lse,
                                 .sm_scale = plan.heads().scale(),
                                 .soft_cap = soft_cap,
                                 .k_scale = kv.k_scale,
                                 .v_scale = kv.v_scale,
                                 .sinks = io.sinks,
                                 .fp8_e5m2 = kv.dtype == DType::e5m2};
    const cuda::RunVariant variant{.masked = masked, .soft_cap = soft_cap > 0.f};
    if constexpr (cuda_wide_head_dim(D)) {  // with wide blocks validate_run made sure of sm_90 and sm_90a code
      if (launches.wide) cuda::WideKernels<D, T, kFp8>::launch(params, variant, stream);
    }
    if (launches.pac) cuda::PacKernels<D, T, kFp8>::launch(params, variant, launches.wide, stream);
    if (launches.merge) {
      const cuda::MergeParams merge{.plan = device,
                                    .part_o = part_o,
                                    .part_lse = part_lse,
                                    .out = io.out.data,
                                    .out_rows = io.out.strides(),
                                    .lse = io.lse.data,
                                    .lse_rows = io.lse.strides(),
                                    .lse_scale = lse_scale,
                                    .sinks = io.sinks,
                                    .warps_per_row = cuda::merge_warps_per_row<D>(plan.extent().max_partials)};
      cuda::MergeKernels<D, T>::launch(merge, stream);
    }
  });
}

}  // namespace codec
