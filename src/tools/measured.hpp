#pragma once
#include <vector>

#include "codec/engine/reference.hpp"

namespace codec::tools {

// One engine's run of one plan: its median time and its checked output.
struct Measured {
  double median_ms = 0;
  double partial_ms = -1;  // CUDA: median time of the partial attention alone (no merge); −1 when not measured
  double host_us = -1;     // CUDA: host time of one run_cuda call (validation and launches, no graph; a Debug
                           // build synchronises after each launch, so there it includes the kernels); −1 if not measured
  ErrorStats error;      // out against the fp64 reference
  ErrorStats lse_error;  // lse against the fp64 reference
  std::vector<float> out, lse;  // [B, Hq, D] and [B, Hq], widened to fp32
};

}  // namespace codec::tools
