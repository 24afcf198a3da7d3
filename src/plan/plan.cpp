#include "codec/plan/plan.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "codec/core/error.hpp"

namespace codec {

namespace {

constexpr std::size_t kAlign = 16;  // every array starts 16-byte aligned (vector loads on a device)
std::size_t align_up(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Element counts of the packed arrays, in PlanView order.
struct ArraySizes {
  std::size_t tasks, block_indptr, node_page_begin, node_pages, node_req_begin, node_reqs, node_splits,
      node_slot_base, partial_indptr, partials;

  std::array<std::size_t, 10> bytes() const {
    return {tasks * sizeof(Task), block_indptr * 4, node_page_begin * 4, node_pages * 4, node_req_begin * 4,
            node_reqs * 4, node_splits * 4, node_slot_base * 4, partial_indptr * 4, partials * sizeof(PartialRef)};
  }
  static ArraySizes of(const PlanArrays& a) {
    return {a.tasks.size(), a.block_indptr.size(), a.node_page_begin.size(), a.node_pages.size(),
            a.node_req_begin.size(), a.node_reqs.size(), a.node_splits.size(), a.node_slot_base.size(),
            a.partial_indptr.size(), a.partials.size()};
  }
  static ArraySizes of(const PlanCapacity& c) {
    const auto nodes = std::size_t(c.nodes);
    return {std::size_t(c.tasks), std::size_t(c.blocks) + 1, nodes + 1, std::size_t(c.node_pages), nodes + 1,
            std::size_t(c.node_reqs), nodes, nodes, std::size_t(c.requests) + 1, std::size_t(c.partials)};
  }
};

std::size_t packed_size(const ArraySizes& sizes) {
  std::size_t total = 0;
  for (const std::size_t bytes : sizes.bytes()) total = align_up(total + bytes);
  return total;
}

// Throws naming the first array of `a` that does not fit `c`.
void check_fits(const PlanArrays& a, const PlanCapacity& c) {
  const auto requests = std::int64_t(a.partial_indptr.size()) - 1, nodes = std::int64_t(a.node_splits.size());
  const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> sizes[] = {
      {"requests", {requests, c.requests}},
      {"blocks", {std::int64_t(a.block_indptr.size()) - 1, c.blocks}},
      {"nodes", {nodes, c.nodes}},
      {"node pages", {std::int64_t(a.node_pages.size()), c.node_pages}},
      {"node requests", {std::int64_t(a.node_reqs.size()), c.node_reqs}},
      {"tasks", {std::int64_t(a.tasks.size()), c.tasks}},
      {"partials", {std::int64_t(a.partials.size()), c.partials}},
  };
  for (const auto& [name, v] : sizes)
    CODEC_CHECK(v.first <= v.second, "plan has ", v.first, " ", name, ", more than its capacity of ", v.second);
  CODEC_CHECK(std::int64_t(a.block_indptr.size()) - 1 == c.blocks, "plan has ", a.block_indptr.size() - 1,
              " blocks; a plan at this capacity must have exactly ", c.blocks);
}

}  // namespace

PlanCapacity PlanCapacity::for_batches(int max_requests, std::int64_t max_page_entries, const HeadConfig& heads,
                                       int max_tile_rows, int blocks, std::int64_t slots) {
  CODEC_CHECK(max_requests >= 1, "capacity: max_requests ", max_requests, " must be >= 1");
  CODEC_CHECK(max_page_entries >= 1, "capacity: max_page_entries ", max_page_entries, " must be >= 1");
  CODEC_CHECK(max_tile_rows >= 1, "capacity: max_tile_rows ", max_tile_rows, " must be >= 1");
  heads.validate();
  PlanCapacity c;
  c.requests = max_requests;
  c.blocks = blocks;
  c.nodes = int(std::min<std::int64_t>(2 * std::int64_t(max_requests) - 1, max_page_entries));
  c.node_pages = max_page_entries;
  c.node_reqs = max_page_entries;
  c.slots = slots;
  c.partials = slots / heads.num_qo_heads;
  c.tasks = slots / std::max(1, std::min(heads.group(), max_tile_rows / 2));
  c.validate();
  return c;
}

void PlanCapacity::validate() const {
  CODEC_CHECK(requests >= 1 && blocks >= 1 && nodes >= 1, "capacity: requests ", requests, ", blocks ", blocks,
              " and nodes ", nodes, " must be >= 1");
  CODEC_CHECK(node_pages >= 0 && node_reqs >= 0 && tasks >= 0 && partials >= 0 && slots >= 0,
              "capacity: sizes must be >= 0");
  constexpr std::int64_t kInt = std::numeric_limits<std::int32_t>::max();
  CODEC_CHECK(node_pages <= kInt && node_reqs <= kInt && tasks <= kInt && partials <= kInt && slots <= kInt,
              "capacity: every size must fit in 32 bits (slots ", slots, ", node pages ", node_pages, ")");
}

Plan::Plan(const HeadConfig& heads, DType dtype, int page_size, const PlanArrays& a, const PlanStats& stats,
           const PlanCapacity* capacity)
    : heads_(heads), dtype_(dtype), has_capacity_(capacity != nullptr), stats_(stats) {
  if (capacity) {
    capacity->validate();
    check_fits(a, *capacity);
  }
  const ArraySizes sizes = capacity ? ArraySizes::of(*capacity) : ArraySizes::of(a);
  const std::array<std::size_t, kNumArrays> bytes = sizes.bytes();
  std::size_t total = 0;
  for (int i = 0; i < kNumArrays; ++i) offsets_[i] = total, total = align_up(total + bytes[i]);
  buffer_.assign(total, std::byte{0});
  // std::memcpy into bytes implicitly creates the Task and PartialRef objects (C++20 implicit-lifetime types).
  auto put = [&](Array i, const auto& v) {
    if (!v.empty()) std::memcpy(buffer_.data() + offsets_[i], v.data(), v.size() * sizeof(v[0]));
  };
  put(kTasks, a.tasks);
  put(kBlockIndptr, a.block_indptr);
  put(kNodePageBegin, a.node_page_begin);
  put(kNodePages, a.node_pages);
  put(kNodeReqBegin, a.node_req_begin);
  put(kNodeReqs, a.node_reqs);
  put(kNodeSplits, a.node_splits);
  put(kNodeSlotBase, a.node_slot_base);
  put(kPartials, a.partials);
  // The reduction schedule covers every request of the capacity: those past
  // the batch repeat the last offset, so they have no partials.
  std::vector<std::int32_t> partial_indptr = a.partial_indptr;
  partial_indptr.resize(sizes.partial_indptr, partial_indptr.empty() ? 0 : partial_indptr.back());
  put(kPartialIndptr, partial_indptr);

  counts_.num_tasks = int(a.tasks.size());
  counts_.num_blocks = int(a.block_indptr.size()) - 1;
  counts_.num_nodes = int(a.node_splits.size());
  counts_.num_requests = int(sizes.partial_indptr) - 1;
  counts_.num_slots = capacity ? int(capacity->slots) : stats.num_slots;
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
  extent_.needs_merge = extent_.needs_merge || has_capacity_;
}

PlanView Plan::view(const void* base) const {
  const auto* b = static_cast<const std::byte*>(base);
  auto ints = [&](Array i) { return reinterpret_cast<const std::int32_t*>(b + offsets_[i]); };
  PlanView v = counts_;
  v.tasks = reinterpret_cast<const Task*>(b + offsets_[kTasks]);
  v.block_indptr = ints(kBlockIndptr);
  v.node_page_begin = ints(kNodePageBegin);
  v.node_pages = ints(kNodePages);
  v.node_req_begin = ints(kNodeReqBegin);
  v.node_reqs = ints(kNodeReqs);
  v.node_splits = ints(kNodeSplits);
  v.node_slot_base = ints(kNodeSlotBase);
  v.partial_indptr = ints(kPartialIndptr);
  v.partials = reinterpret_cast<const PartialRef*>(b + offsets_[kPartials]);
  return v;
}

std::size_t Plan::packed_bytes(const PlanCapacity& capacity) { return packed_size(ArraySizes::of(capacity)); }

WorkspaceLayout Plan::workspace_for(std::int64_t slots, int head_dim) {
  WorkspaceLayout w;
  const auto n = std::size_t(slots);
  w.o_offset = 0;
  w.lse_offset = align_up(n * std::size_t(head_dim) * sizeof(float));
  w.bytes = align_up(w.lse_offset + n * sizeof(float));
  return w;
}

}  // namespace codec
