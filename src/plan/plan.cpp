#include "codec/plan/plan.hpp"

#include <algorithm>
#include <cstring>

#include "codec/core/error.hpp"

namespace codec {

namespace {
constexpr std::size_t kAlign = 16;  // every array starts 16-byte aligned (vector loads on a device)
std::size_t align_up(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }
}  // namespace

Plan::Plan(const HeadConfig& heads, int page_size, const PlanArrays& a, const PlanStats& stats)
    : heads_(heads), page_size_(page_size), stats_(stats) {
  const std::pair<const void*, std::size_t> arrays[] = {
      {a.tasks.data(), a.tasks.size() * sizeof(Task)},
      {a.block_indptr.data(), a.block_indptr.size() * 4},
      {a.node_page_begin.data(), a.node_page_begin.size() * 4},
      {a.node_pages.data(), a.node_pages.size() * 4},
      {a.node_req_begin.data(), a.node_req_begin.size() * 4},
      {a.node_reqs.data(), a.node_reqs.size() * 4},
      {a.node_splits.data(), a.node_splits.size() * 4},
      {a.node_slot_base.data(), a.node_slot_base.size() * 4},
      {a.partial_indptr.data(), a.partial_indptr.size() * 4},
      {a.partials.data(), a.partials.size() * sizeof(PartialRef)},
  };
  static_assert(std::size(arrays) == std::tuple_size_v<decltype(offsets_)>);
  std::size_t total = 0;
  for (std::size_t i = 0; i < std::size(arrays); ++i) offsets_[i] = total, total = align_up(total + arrays[i].second);
  // std::memcpy into bytes implicitly creates the Task and PartialRef objects (C++20 implicit-lifetime types).
  buffer_.assign(total, std::byte{0});
  for (std::size_t i = 0; i < std::size(arrays); ++i)
    if (arrays[i].second) std::memcpy(buffer_.data() + offsets_[i], arrays[i].first, arrays[i].second);

  counts_.num_tasks = int(a.tasks.size());
  counts_.num_blocks = int(a.block_indptr.size()) - 1;
  counts_.num_nodes = int(a.node_splits.size());
  counts_.num_requests = int(a.partial_indptr.size()) - 1;
  counts_.num_slots = stats.num_slots;
  counts_.group = heads.group();
  counts_.num_qo_heads = heads.num_qo_heads;
  counts_.num_kv_heads = heads.num_kv_heads;
  counts_.head_dim = heads.head_dim;
  counts_.page_size = page_size;

  for (const Task& t : a.tasks) extent_.max_task_rows = std::max(extent_.max_task_rows, t.row_end - t.row_begin);
  if (!a.node_pages.empty()) {
    const auto [lo, hi] = std::minmax_element(a.node_pages.begin(), a.node_pages.end());
    extent_.min_page = *lo, extent_.max_page = *hi;
  }
  for (std::size_t r = 0; r + 1 < a.partial_indptr.size(); ++r) {
    const int n = a.partial_indptr[r + 1] - a.partial_indptr[r];
    extent_.min_partials = r == 0 ? n : std::min(extent_.min_partials, n);
    extent_.max_partials = std::max(extent_.max_partials, n);
    extent_.needs_merge = extent_.needs_merge || n != 1;
  }
}

PlanView Plan::view(const void* base) const {
  const auto* b = static_cast<const std::byte*>(base);
  auto ints = [&](int i) { return reinterpret_cast<const std::int32_t*>(b + offsets_[i]); };
  PlanView v = counts_;
  v.tasks = reinterpret_cast<const Task*>(b + offsets_[0]);
  v.block_indptr = ints(1);
  v.node_page_begin = ints(2);
  v.node_pages = ints(3);
  v.node_req_begin = ints(4);
  v.node_reqs = ints(5);
  v.node_splits = ints(6);
  v.node_slot_base = ints(7);
  v.partial_indptr = ints(8);
  v.partials = reinterpret_cast<const PartialRef*>(b + offsets_[9]);
  return v;
}

WorkspaceLayout Plan::workspace() const {
  WorkspaceLayout w;
  const std::size_t slots = std::size_t(counts_.num_slots);
  w.o_offset = 0;
  w.lse_offset = align_up(slots * std::size_t(heads_.head_dim) * sizeof(float));
  w.bytes = align_up(w.lse_offset + slots * sizeof(float));
  return w;
}

}  // namespace codec
