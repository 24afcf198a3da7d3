#pragma once
// A fact about the current CUDA device, found once per device and kept: the
// engine asks such questions on every run (which kernels the device runs,
// whether a kernel's shared-memory limit is set), and the driver calls that
// answer them cost ~1-2 µs of host time each.
#include <cuda_runtime_api.h>

#include <atomic>

#include "codec/engine/cuda_check.hpp"

namespace codec::cuda {

// find(device) for the current device, a value >= 0, called once per device
// and Key (one cache per call site: a tag or the function asking). Devices
// past the cache's 64 ask every time.
template <auto Key, typename Find>
int per_device(Find&& find) {
  constexpr int kCachedDevices = 64;
  static std::atomic<int> known[kCachedDevices] = {};  // the value + 1; 0 while unknown
  int device = 0;
  CODEC_CUDA_CHECK(cudaGetDevice(&device));
  if (device < kCachedDevices)
    if (const int v = known[device].load(std::memory_order_acquire); v != 0) return v - 1;
  const int value = find(device);
  if (device < kCachedDevices) known[device].store(value + 1, std::memory_order_release);
  return value;
}

}  // namespace codec::cuda
