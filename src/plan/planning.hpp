#pragma once
// The planner's steps (planning.cpp) as make_plan and StepPlanner call them.
// Internal to the planner (src/plan/).
#include <chrono>

#include "codec/core/heads.hpp"
#include "codec/cost/cost_model.hpp"
#include "codec/forest/forest.hpp"
#include "codec/plan/plan.hpp"
#include "codec/plan/planner.hpp"
#include "codec/plan/queries.hpp"

namespace codec::planning {

// The plan's arrays into `a` (appended to: pass cleared arrays), and its
// stats; validates the forest, heads, options and queries first.
PlanStats plan_arrays(const Forest& forest, const HeadConfig& heads, const CostModel& cost, const PlannerOptions& opt,
                      PlanArrays& a, const QueryBatch& queries = {});

inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace codec::planning
