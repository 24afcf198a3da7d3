#pragma once
// Input checks every engine's run entry shares: the plan is a real one and the
// paged KV it is run on matches it. Each failure names the engine, the field
// and both values.
#include "codec/forest/page_table.hpp"
#include "codec/plan/plan.hpp"

namespace codec {

void check_plan_and_kv(const Plan& plan, const PagedKV& kv, const char* engine);

}  // namespace codec
