#include "codec/engine/run_checks.hpp"

#include "codec/core/error.hpp"

namespace codec {

void check_plan_and_kv(const Plan& plan, const PagedKV& kv, const char* engine) {
  CODEC_CHECK(!plan.bytes().empty(), engine, ": the plan is empty (default-constructed); make one with make_plan");
  kv.validate();
  const HeadConfig& h = plan.heads();
  const PlanView p = plan.view();
  CODEC_CHECK(kv.num_kv_heads == h.num_kv_heads, engine, ": kv.num_kv_heads ", kv.num_kv_heads,
              " but the plan was made for ", h.num_kv_heads);
  CODEC_CHECK(kv.head_dim == h.head_dim, engine, ": kv.head_dim ", kv.head_dim, " but the plan was made for ",
              h.head_dim);
  CODEC_CHECK(kv.page_size == p.page_size, engine, ": kv.page_size ", kv.page_size, " but the plan was made for ",
              p.page_size);
  const PlanExtent& e = plan.extent();
  if (e.max_page >= e.min_page)
    CODEC_CHECK(e.min_page >= 0 && e.max_page < kv.num_pages, engine, ": plan pages span [", e.min_page, ", ",
                e.max_page, "], outside the KV pool of ", kv.num_pages, " pages");
}

}  // namespace codec
