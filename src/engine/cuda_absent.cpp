// The CUDA engine's entry points in a build without it (no nvcc): what needs
// no GPU answers (no devices, no architectures), the rest refuses with one
// clear error, so that front ends call the same API in every build.
#include <optional>
#include <string>

#include "codec/core/error.hpp"
#include "codec/engine/cuda_engine.hpp"
#include "codec/engine/cuda_stream_planner.hpp"

namespace codec {

namespace {

[[noreturn]] void absent(const char* what) {
  CODEC_FAIL(what, ": this build of CoDec has no CUDA engine (it was built without nvcc)");
}

}  // namespace

int cuda_device_count() noexcept { return 0; }
const char* cuda_built_architectures() { return ""; }
std::string cuda_device_name(int) { absent("cuda_device_name"); }
CudaDeviceScope::CudaDeviceScope(int) { absent("a CUDA device"); }
CudaDeviceScope::~CudaDeviceScope() = default;
CudaDeviceInfo cuda_device_info(const HeadConfig&, DType) { absent("cuda_device_info"); }
PlannerOptions cuda_planner_options(const HeadConfig&, DType) { absent("cuda_planner_options"); }
void cuda_upload_plan(const Plan&, std::span<std::byte>, CudaStream) { absent("cuda_upload_plan"); }

struct CudaPlanStaging::Impl {};
CudaPlanStaging::CudaPlanStaging() { absent("CudaPlanStaging"); }
CudaPlanStaging::~CudaPlanStaging() = default;
void CudaPlanStaging::upload(const Plan&, std::span<std::byte>, CudaStream) { absent("CudaPlanStaging::upload"); }

CudaLaunches cuda_launches(const Plan&, CudaStages) { absent("cuda_launches"); }
void run_cuda(const Plan&, const PagedKV&, const AttentionIO&, std::span<std::byte>, CudaStream, CudaStages) {
  absent("run_cuda");
}
void cuda_merge_states(const QueryRows&, const LseRows&, const QueryRows&, const LseRows&, const OutputRows&,
                       const LseRows&, LseBase, CudaStream) {
  absent("cuda_merge_states");
}
void cuda_copy_pages(const PagedKV&, std::span<const PageCopy>, CudaStream) { absent("cuda_copy_pages"); }

struct CudaStreamPlanner::Impl {};
CudaStreamPlanner::CudaStreamPlanner(const HeadConfig&, DType, int, std::shared_ptr<const CostModel>,
                                     const PlannerOptions&, int, int, std::int64_t) {
  absent("CudaStreamPlanner");
}
CudaStreamPlanner::~CudaStreamPlanner() = default;
const Plan& CudaStreamPlanner::capacity_plan() const { absent("CudaStreamPlanner"); }
void CudaStreamPlanner::enqueue(const BlockTable&, std::int64_t, std::span<std::byte>, CudaStream,
                                const DeviceQueries&) {
  absent("CudaStreamPlanner");
}
std::optional<std::string> CudaStreamPlanner::take_error() { return std::nullopt; }
PlanStats CudaStreamPlanner::last_stats() const { absent("CudaStreamPlanner"); }
CudaStreamPlanner::Totals CudaStreamPlanner::totals() const { absent("CudaStreamPlanner"); }

}  // namespace codec
