#pragma once
// The CUDA engine's workspace layout: the packed plan, padded to 256 bytes,
// then the partials. Host arithmetic that every build has, so that a plan
// for a GPU can be sized without one. Internal to the library.
#include <cstddef>

namespace codec {

// The partials after the plan start as cudaMalloc'd memory would.
inline constexpr std::size_t kCudaPlanAlign = 256;

inline std::size_t cuda_plan_region_bytes(std::size_t plan_bytes) {
  return (plan_bytes + kCudaPlanAlign - 1) / kCudaPlanAlign * kCudaPlanAlign;
}

}  // namespace codec
