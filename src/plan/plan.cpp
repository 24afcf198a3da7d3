#include "codec/plan/plan.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "codec/core/error.hpp"
#include "plan/query_forest.hpp"

namespace codec {

namespace {

constexpr std::size_t kAlign = 16;  // every array starts 16-byte aligned (vector loads on a device)
std::size_t align_up(std::size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Every packed array once, in buffer order: f(its PlanArrays vector, its
// PlanView pointer, its length in a plan packed at capacity c).
template <typename F>
constexpr void for_each_array(F&& f) {
  using C = const PlanCapacity&;
  f(&PlanArrays::tasks, &PlanView::tasks, [](C c) { return c.tasks; });
  f(&PlanArrays::block_indptr, &PlanView::block_indptr, [](C c) { return std::int64_t(c.blocks) + 1; });
  f(&PlanArrays::wide_indptr, &PlanView::wide_indptr,
    [](C c) { return c.wide_blocks ? std::int64_t(c.wide_blocks) + 1 : 0; });
  f(&PlanArrays::node_page_begin, &PlanView::node_page_begin, [](C c) { return std::int64_t(c.nodes) + 1; });
  f(&PlanArrays::node_pages, &PlanView::node_pages, [](C c) { return c.node_pages; });
  f(&PlanArrays::node_req_begin, &PlanView::node_req_begin, [](C c) { return std::int64_t(c.nodes) + 1; });
  f(&PlanArrays::node_reqs, &PlanView::node_reqs, [](C c) { return c.node_reqs; });
  f(&PlanArrays::node_splits, &PlanView::node_splits, [](C c) { return std::int64_t(c.nodes); });
  f(&PlanArrays::node_slot_base, &PlanView::node_slot_base, [](C c) { return std::int64_t(c.nodes); });
  f(&PlanArrays::partial_indptr, &PlanView::partial_indptr, [](C c) { return std::int64_t(c.requests) + 1; });
  f(&PlanArrays::partials, &PlanView::partials, [](C c) { return c.partials; });
  f(&PlanArrays::tail_indptr, &PlanView::tail_indptr,
    [](C c) { return c.tail_tokens > 0 ? c.node_reqs + 1 : std::int64_t(0); });
  f(&PlanArrays::tail_tokens, &PlanView::tail_tokens, [](C c) { return c.tail_tokens; });
  f(&PlanArrays::node_kv_begin, &PlanView::node_kv_begin, [](C c) { return c.masks ? std::int64_t(c.nodes) : 0; });
  f(&PlanArrays::query_lo, &PlanView::query_lo, [](C c) { return c.masks ? std::int64_t(c.requests) : 0; });
  f(&PlanArrays::query_hi, &PlanView::query_hi, [](C c) { return c.masks ? std::int64_t(c.requests) : 0; });
  f(&PlanArrays::query_bits_pos, &PlanView::query_bits_pos, [](C c) { return c.masks ? std::int64_t(c.requests) : 0; });
  f(&PlanArrays::query_bits_word, &PlanView::query_bits_word,
    [](C c) { return c.masks ? std::int64_t(c.requests) : 0; });
  f(&PlanArrays::mask_words, &PlanView::mask_words, [](C c) { return c.mask_words; });
}

constexpr int count_arrays() {
  int n = 0;
  for_each_array([&](auto, auto, auto) { ++n; });
  return n;
}

template <typename Vector>
using element_of = typename std::remove_cvref_t<Vector>::value_type;

// Byte offsets of the arrays, then the total: with the lengths of a plan
// packed at `capacity`, or the arrays' own when it is null.
std::array<std::size_t, count_arrays() + 1> offsets_of(const PlanArrays* a, const PlanCapacity* capacity) {
  std::array<std::size_t, count_arrays() + 1> offsets{};
  int i = 0;
  for_each_array([&](auto vector, auto, auto length) {
    using T = element_of<decltype(std::declval<PlanArrays>().*vector)>;
    const std::size_t n = capacity ? std::size_t(length(*capacity)) : (a->*vector).size();
    offsets[i + 1] = align_up(offsets[i] + n * sizeof(T));
    ++i;
  });
  return offsets;
}

// Throws naming the first array of `a` that does not fit `c`.
void check_fits(const PlanArrays& a, const PlanCapacity& c) {
  const auto requests = std::int64_t(a.partial_indptr.size()) - 1, nodes = std::int64_t(a.node_splits.size());
  CODEC_CHECK(c.masks || a.query_lo.empty(), "plan has masks (query tokens that see part of their request's keys); "
              "its capacity was made for one query token a request (give a maximum of query tokens)");
  const std::pair<const char*, std::pair<std::int64_t, std::int64_t>> sizes[] = {
      {"requests", {requests, c.requests}},
      {"blocks", {std::int64_t(a.block_indptr.size()) - 1, c.blocks}},
      {"nodes", {nodes, c.nodes}},
      {"node pages", {std::int64_t(a.node_pages.size()), c.node_pages}},
      {"node requests", {std::int64_t(a.node_reqs.size()), c.node_reqs}},
      {"tasks", {std::int64_t(a.tasks.size()), c.tasks}},
      {"partials", {std::int64_t(a.partials.size()), c.partials}},
      {"tail tokens", {std::int64_t(a.tail_tokens.size()), c.tail_tokens}},
      {"mask words", {std::int64_t(a.mask_words.size()), c.mask_words}},
  };
  for (const auto& [name, v] : sizes)
    CODEC_CHECK(v.first <= v.second, "plan has ", v.first, " ", name, ", more than its capacity of ", v.second);
  // a graph captured at a capacity with masks runs the masked kernels for every plan
  CODEC_CHECK(!c.masks || std::int64_t(a.query_lo.size()) == requests, "plan has masks for ", a.query_lo.size(),
              " of its ", requests, " requests; every plan at a capacity with masks carries them for each");
  CODEC_CHECK(std::int64_t(a.block_indptr.size()) - 1 == c.blocks, "plan has ", a.block_indptr.size() - 1,
              " blocks; a plan at this capacity must have exactly ", c.blocks);
  const std::int64_t wide = a.wide_indptr.empty() ? 0 : std::int64_t(a.wide_indptr.size()) - 1;
  CODEC_CHECK(wide == c.wide_blocks, "plan has ", wide, " wide blocks; a plan at this capacity must have exactly ",
              c.wide_blocks);
  CODEC_CHECK(std::int64_t(a.node_page_begin.size()) == nodes + 1 && std::int64_t(a.node_req_begin.size()) == nodes + 1 &&
                  std::int64_t(a.node_slot_base.size()) == nodes,
              "plan arrays disagree on their ", nodes, " nodes (node_page_begin ", a.node_page_begin.size(),
              ", node_req_begin ", a.node_req_begin.size(), ", node_slot_base ", a.node_slot_base.size(), ")");
  // a graph captured at a capacity with tails reads tail_indptr for every plan
  CODEC_CHECK(a.tail_indptr.empty() == (c.tail_tokens == 0), "plan ",
              a.tail_indptr.empty() ? "has no tail_indptr" : "has a tail_indptr", ", but its capacity holds ",
              c.tail_tokens, " tail tokens");
}

// The masks' arrays, where there are some, have an entry per node and per request.
void check_masks(const PlanArrays& a) {
  if (a.query_lo.empty()) {
    CODEC_CHECK(a.node_kv_begin.empty() && a.query_hi.empty() && a.query_bits_pos.empty() &&
                    a.query_bits_word.empty() && a.mask_words.empty(),
                "plan has parts of masks but no query_lo");
    return;
  }
  const std::size_t requests = a.partial_indptr.empty() ? 0 : a.partial_indptr.size() - 1;
  CODEC_CHECK(a.node_kv_begin.size() == a.node_splits.size() && a.query_lo.size() == requests &&
                  a.query_hi.size() == requests && a.query_bits_pos.size() == requests &&
                  a.query_bits_word.size() == requests,
              "plan masks of ", a.node_kv_begin.size(), " nodes and ", a.query_lo.size(), " requests, for ",
              a.node_splits.size(), " nodes and ", requests, " requests");
}

// tail_indptr, where there is one, has an entry per node request and one more.
void check_tails(const PlanArrays& a) {
  if (a.tail_indptr.empty()) {
    CODEC_CHECK(a.tail_tokens.empty(), "plan has ", a.tail_tokens.size(), " tail tokens but no tail_indptr");
    return;
  }
  CODEC_CHECK(a.tail_indptr.size() == a.node_reqs.size() + 1 && a.tail_indptr.front() == 0 &&
                  std::size_t(a.tail_indptr.back()) == a.tail_tokens.size(),
              "plan tail_indptr of ", a.tail_indptr.size(), " entries from ", a.tail_indptr.front(), " to ",
              a.tail_indptr.back(), " does not index ", a.tail_tokens.size(), " tail tokens for ", a.node_reqs.size(),
              " node requests");
}

// Writes each array of `a` at its offset in `out`, the reduction schedule
// extended over `requests` rows (a capacity's: those past the batch repeat
// the last offset, so they have no partials).
void write_arrays(const PlanArrays& a, const std::array<std::size_t, count_arrays() + 1>& offsets, int requests,
                  std::byte* out) {
  // std::memcpy into bytes implicitly creates the Task and PartialRef objects (C++20 implicit-lifetime types).
  int i = 0;
  std::byte* indptr = nullptr;
  for_each_array([&](auto vector, auto, auto) {
    const auto& v = a.*vector;
    std::byte* at = out + offsets[i++];
    if (!v.empty()) std::memcpy(at, v.data(), v.size() * sizeof(v[0]));
    if (static_cast<const void*>(&v) == &a.partial_indptr) indptr = at;
  });
  const std::vector<std::int32_t>& p = a.partial_indptr;
  const std::int64_t missing = std::int64_t(requests) + 1 - std::int64_t(p.size());
  if (missing > 0) std::fill_n(reinterpret_cast<std::int32_t*>(indptr) + p.size(), missing, p.empty() ? 0 : p.back());
}

}  // namespace

PlanCapacity PlanCapacity::for_batches(int max_requests, std::int64_t max_page_entries, const HeadConfig& heads,
                                       int max_tile_rows, int blocks, std::int64_t slots, int wide_blocks,
                                       int max_tail_tokens, const QueryCapacity& queries) {
  CODEC_CHECK(max_requests >= 1, "capacity: max_requests ", max_requests, " must be >= 1");
  CODEC_CHECK(max_page_entries >= 1, "capacity: max_page_entries ", max_page_entries, " must be >= 1");
  CODEC_CHECK(max_tile_rows >= 1, "capacity: max_tile_rows ", max_tile_rows, " must be >= 1");
  CODEC_CHECK(max_tail_tokens >= 0, "capacity: max_tail_tokens ", max_tail_tokens, " must be >= 0");
  CODEC_CHECK(queries.tokens == 0 || queries.tokens >= max_requests, "capacity: max_query_tokens ", queries.tokens,
              " must be 0 (one a request) or >= max_requests ", max_requests, " (every request has one)");
  CODEC_CHECK(queries.mask_bytes >= 0 && (queries.tokens > 0 || queries.mask_bytes == 0), "capacity: max_mask_bytes ",
              queries.mask_bytes, " must be >= 0, and 0 without a maximum of query tokens");
  heads.validate();
  PlanCapacity c;
  c.requests = queries.tokens > 0 ? queries.tokens : max_requests;
  c.blocks = blocks;
  c.wide_blocks = wide_blocks;
  c.nodes = int(std::min<std::int64_t>(2 * std::int64_t(max_requests) - 1, max_page_entries));
  c.node_pages = max_page_entries;
  c.node_reqs = max_page_entries;
  c.slots = slots;
  c.partials = slots / heads.num_qo_heads;
  c.tasks = slots / std::max(1, std::min(heads.group(), max_tile_rows / 2));
  c.tail_tokens = std::int64_t(max_requests) * max_tail_tokens;
  if (queries.tokens > 0) {
    // A batch of k requests lists at most P + (T − k) · min(P, k) node requests; the most over k.
    std::int64_t extra = 0;
    for (std::int64_t k = 1; k <= max_requests; ++k)
      extra = std::max(extra, (queries.tokens - k) * std::min<std::int64_t>(max_page_entries, k));
    c.node_reqs = max_page_entries + extra;
    c.masks = true;
    c.mask_words = queries.mask_bytes > 0 ? queries.mask_bytes / 4 + queries.tokens : 0;
    c.tail_tokens = 0;
  }
  c.validate();
  return c;
}

void PlanCapacity::validate() const {
  CODEC_CHECK(requests >= 1 && blocks >= 1 && nodes >= 1, "capacity: requests ", requests, ", blocks ", blocks,
              " and nodes ", nodes, " must be >= 1");
  CODEC_CHECK(wide_blocks >= 0, "capacity: wide_blocks ", wide_blocks, " must be >= 0");
  CODEC_CHECK(node_pages >= 0 && node_reqs >= 0 && tasks >= 0 && partials >= 0 && slots >= 0 && tail_tokens >= 0 &&
                  mask_words >= 0,
              "capacity: sizes must be >= 0");
  CODEC_CHECK(masks || mask_words == 0, "capacity: ", mask_words, " mask words without masks");
  CODEC_CHECK(!masks || tail_tokens == 0, "capacity: masks and ", tail_tokens,
              " tail tokens (a plan with masks takes in no tails)");
  constexpr std::int64_t kInt = std::numeric_limits<std::int32_t>::max();
  CODEC_CHECK(node_pages <= kInt && node_reqs <= kInt && tasks <= kInt && partials <= kInt && slots <= kInt &&
                  tail_tokens <= kInt && mask_words <= kInt,
              "capacity: every size must fit in 32 bits (slots ", slots, ", node pages ", node_pages,
              ", node requests ", node_reqs, ", tail tokens ", tail_tokens, ", mask words ", mask_words, ")");
}

Plan::Plan(const HeadConfig& heads, DType dtype, int page_size, const PlanArrays& a, const PlanStats& stats,
           const PlanCapacity* capacity)
    : heads_(heads), dtype_(dtype), has_capacity_(capacity != nullptr), stats_(stats) {
  check_tails(a);
  check_masks(a);
  if (capacity) {
    capacity->validate();
    check_fits(a, *capacity);
  }
  static_assert(count_arrays() == kNumArrays, "the table of packed arrays and Plan::kNumArrays disagree");
  const auto offsets = offsets_of(&a, capacity);
  std::copy_n(offsets.begin(), kNumArrays, offsets_.begin());
  buffer_.assign(offsets.back(), std::byte{0});
  const int requests = capacity ? capacity->requests : int(a.partial_indptr.size()) - 1;
  write_arrays(a, offsets, requests, buffer_.data());

  counts_.num_tasks = int(a.tasks.size());
  counts_.num_blocks = int(a.block_indptr.size()) - 1;
  counts_.num_wide_blocks = a.wide_indptr.empty() ? 0 : int(a.wide_indptr.size()) - 1;
  counts_.num_nodes = int(a.node_splits.size());
  counts_.num_requests = requests;
  counts_.num_slots = capacity ? int(capacity->slots) : stats.num_slots;
  counts_.group = heads.group();
  counts_.num_qo_heads = heads.num_qo_heads;
  counts_.num_kv_heads = heads.num_kv_heads;
  counts_.head_dim = heads.head_dim;
  counts_.page_size = page_size;
  counts_.single_task_blocks = !capacity && counts_.num_wide_blocks == 0;
  counts_.tails = capacity ? capacity->tail_tokens > 0 : !a.tail_indptr.empty();
  counts_.masks = capacity ? capacity->masks : !a.query_lo.empty();
  for (int b = 0; b <= counts_.num_blocks && counts_.single_task_blocks; ++b)
    counts_.single_task_blocks = a.block_indptr[std::size_t(b)] == std::min(b, counts_.num_tasks);

  const std::size_t narrow = a.block_indptr.empty() ? 0 : std::size_t(a.block_indptr.back());
  for (std::size_t i = 0; i < a.tasks.size(); ++i) {
    int& most = i < narrow ? extent_.max_task_rows : extent_.max_wide_rows;
    most = std::max(most, a.tasks[i].row_end - a.tasks[i].row_begin);
  }
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
  if (!a.query_lo.empty()) {
    // A task inside what every row of its node sees has no masked row: only
    // the others are looked at row by row.
    std::vector<planning::SeenByAll> seen(a.node_kv_begin.size());
    for (std::size_t i = 0; i < seen.size(); ++i)
      seen[i] = planning::seen_by_all(a, a.node_reqs.data() + a.node_req_begin[i],
                                      a.node_req_begin[i + 1] - a.node_req_begin[i]);
    const PlanView v = view();
    for (const Task& t : a.tasks) {
      const std::int32_t base = a.node_kv_begin[std::size_t(t.node)];
      extent_.masked_tasks +=
          !seen[std::size_t(t.node)].covers(base + t.kv_begin, base + t.kv_end) && v.masked(t);
    }
    extent_.windowed = std::any_of(a.query_lo.begin(), a.query_lo.end(), [](std::int32_t lo) { return lo > 0; });
  }
}

PlanArrays PlanArrays::none(int blocks, int wide_blocks, bool tails) {
  PlanArrays a;
  if (tails) a.tail_indptr = {0};
  a.block_indptr.assign(std::size_t(blocks) + 1, 0);
  if (wide_blocks > 0) a.wide_indptr.assign(std::size_t(wide_blocks) + 1, 0);
  a.node_page_begin = {0};
  a.node_req_begin = {0};
  a.partial_indptr = {0};
  return a;
}

void PlanArrays::clear() {
  for_each_array([&](auto vector, auto, auto) { (this->*vector).clear(); });
}

Plan Plan::empty(const HeadConfig& heads, DType dtype, int page_size, const PlanCapacity& capacity) {
  PlanStats stats;
  stats.num_blocks = capacity.blocks;
  return Plan(heads, dtype, page_size, PlanArrays::none(capacity.blocks, capacity.wide_blocks, capacity.tail_tokens > 0),
              stats, &capacity);
}

PlanView Plan::view(const void* base) const {
  const auto* b = static_cast<const std::byte*>(base);
  PlanView v = counts_;
  int i = 0;
  for_each_array([&](auto, auto pointer, auto) {
    v.*pointer = reinterpret_cast<std::remove_reference_t<decltype(v.*pointer)>>(b + offsets_[i++]);
  });
  return v;
}

std::size_t Plan::packed_bytes(const PlanCapacity& capacity) { return offsets_of(nullptr, &capacity).back(); }

void Plan::pack_into(const PlanArrays& arrays, const PlanCapacity& capacity, std::span<std::byte> out) {
  capacity.validate();
  check_tails(arrays);
  check_masks(arrays);
  check_fits(arrays, capacity);
  const auto offsets = offsets_of(nullptr, &capacity);
  CODEC_CHECK(out.size() >= offsets.back(), "Plan::pack_into: ", out.size(), " bytes, less than the ", offsets.back(),
              " of a plan at this capacity");
  write_arrays(arrays, offsets, capacity.requests, out.data());
}

WorkspaceLayout Plan::workspace_for(std::int64_t slots, int head_dim) {
  WorkspaceLayout w;
  const auto n = std::size_t(slots);
  w.o_offset = 0;
  w.lse_offset = align_up(n * std::size_t(head_dim) * sizeof(float));
  w.bytes = align_up(w.lse_offset + n * sizeof(float));
  return w;
}

}  // namespace codec
