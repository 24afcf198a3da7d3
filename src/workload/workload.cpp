#include "workload/workload.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "codec/core/error.hpp"

namespace codec {

namespace {

// The bytes a custom mask over the workload's requests takes (mask_byte_offsets).
std::int64_t custom_mask_bytes(const Workload& w) {
  std::vector<std::int64_t> kv_len;
  for (int r = 0; r < int(w.requests.size()); ++r) kv_len.push_back(w.request_tokens(r));
  std::vector<std::int32_t> qo_indptr;
  for (std::size_t r = 0; r <= w.requests.size(); ++r) qo_indptr.push_back(std::int32_t(r) * w.q_len);
  return mask_byte_offsets(kv_len, {qo_indptr, QueryMask::custom, {}}).back();
}

}  // namespace

void Workload::validate() const {
  const std::int32_t num_nodes = std::int32_t(nodes.size());
  std::unordered_map<std::string, std::int32_t> ids;
  // Every node's tokens get synthetic int32 ids (materialize), so no path's sum can overflow either.
  constexpr std::int64_t kMaxTokens = std::numeric_limits<std::int32_t>::max();
  std::int64_t total = 0;
  for (std::int32_t i = 0; i < num_nodes; ++i) {
    const WorkloadNode& node = nodes[std::size_t(i)];
    // Parents before children is what makes every path walk terminate.
    CODEC_CHECK(node.parent >= -1 && node.parent < i, "node '", clip(node.id), "' (index ", i, ") has parent index ",
                node.parent, "; expected -1 (a root) or an index below ", i, " (parents come first)");
    CODEC_CHECK(node.tokens >= 0, "node '", clip(node.id), "' has tokens ", node.tokens, "; expected >= 0");
    CODEC_CHECK(node.tokens <= kMaxTokens - total, "more than ", kMaxTokens, " tokens over all nodes (node '",
                clip(node.id), "' brings ", node.tokens, "): synthetic int32 token ids allow at most ", kMaxTokens);
    total += node.tokens;
    const auto [it, fresh] = ids.emplace(node.id, i);
    CODEC_CHECK(fresh, "duplicate node id '", clip(node.id), "' at indices ", it->second, " and ", i);
  }
  CODEC_CHECK(!requests.empty(), "workload '", clip(name), "' has no requests");
  for (std::size_t r = 0; r < requests.size(); ++r) {
    const std::int32_t node = requests[r];
    CODEC_CHECK(node >= 0 && node < num_nodes, "request ", r, " names node index ", node, ", outside [0, ",
                num_nodes, ")");
    CODEC_CHECK(request_tokens(int(r)) > 0, "request ", r, " (node '", clip(nodes[std::size_t(node)].id),
                "') has no KV tokens");
  }
  heads.validate();
  CODEC_CHECK(window_left >= -1, "window_left ", window_left, " must be >= -1 (-1: no window)");
  CODEC_CHECK(page_size >= 1, "page_size ", page_size, " must be >= 1");
  CODEC_CHECK(dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::f32 || is_fp8(dtype), "dtype value ",
              int(dtype), " is not a valid DType");
  if (!custom_mask.empty()) {
    CODEC_CHECK(tree_width == 0, "a custom mask and a draft tree (--tree): give one");
    const std::int64_t want = custom_mask_bytes(*this);
    CODEC_CHECK(std::int64_t(custom_mask.size()) == want, "custom mask of ", custom_mask.size(), " bytes; the ",
                requests.size(), " requests' [q_len ", q_len, ", kv_len] matrices take ", want,
                " (each packed in little bit order from a byte boundary)");
  }
}

std::int64_t Workload::request_tokens(int r) const {
  CODEC_CHECK(r >= 0 && std::size_t(r) < requests.size(), "request index ", r, " is outside [0, ", requests.size(),
              ")");
  std::int64_t total = 0;
  for (std::int32_t i = requests[std::size_t(r)]; i >= 0;) {
    CODEC_CHECK(std::size_t(i) < nodes.size(), "request ", r, " reaches node index ", i, ", outside [0, ",
                nodes.size(), ")");
    const WorkloadNode& node = nodes[std::size_t(i)];
    CODEC_CHECK(node.parent < i, "node '", clip(node.id), "' (index ", i, ") has parent index ", node.parent,
                "; parents must come first");
    total += node.tokens;
    i = node.parent;
  }
  return total;
}

std::int64_t Workload::unique_tokens() const {
  // A node's KV exists once however many requests pass through it; nodes on no
  // request's path hold no KV at all.
  std::vector<char> used(nodes.size(), 0);
  for (std::int32_t leaf : requests)
    for (std::int32_t i = leaf; i >= 0 && !used[std::size_t(i)]; i = nodes[std::size_t(i)].parent)
      used[std::size_t(i)] = 1;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (used[i]) total += nodes[i].tokens;
  return total;
}

Workload::Footprint Workload::footprint() const {
  // Doubles: a bound of 2e9 tokens must not overflow while it is computed.
  double request_tokens_sum = 0, request_pages = 0;
  for (std::size_t r = 0; r < requests.size(); ++r) {
    const double tokens = double(request_tokens(int(r)));
    request_tokens_sum += tokens;
    request_pages += std::ceil(tokens / page_size);
  }
  // Pages with KV: each node's, plus a copied partial page per request where branches part.
  double kv_pages = double(requests.size());
  std::vector<char> used(nodes.size(), 0);
  for (std::int32_t leaf : requests)
    for (std::int32_t i = leaf; i >= 0 && !used[std::size_t(i)]; i = nodes[std::size_t(i)].parent)
      used[std::size_t(i)] = 1;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (used[i]) kv_pages += std::ceil(double(nodes[i].tokens) / page_size);
  constexpr double kManagerBytesPerPage = 96;  // a forest-manager page node, its hash entry and free-list slot
  Footprint f;
  f.tables_bytes = 2 * 4 * request_tokens_sum      // token ids: the inserted path, the manager's copy
                   + 3 * 4 * request_pages         // page lists, and the dense renumbering
                   + kManagerBytesPerPage * kv_pages;
  const double rows = double(requests.size()) * q_len * heads.num_qo_heads * heads.head_dim;
  f.batch_bytes = 2 * kv_pages * page_size * heads.num_kv_heads * heads.head_dim * double(dtype_size(dtype))
                  + rows * (double(is_fp8(dtype) ? 2 : dtype_size(dtype)) + 8 + 3 * 4)  // q, the fp64 reference, outputs
                  + double(custom_mask.size());
  return f;
}

Workload Workload::with_custom_mask(std::vector<std::uint8_t> bits) const {
  Workload out = *this;
  out.custom_mask = std::move(bits);
  out.validate();
  return out;
}

Workload Workload::scaled(double factor) const {
  CODEC_CHECK(std::isfinite(factor) && factor > 0, "scale factor ", factor, " must be finite and > 0");
  CODEC_CHECK(custom_mask.empty(), "a workload with a custom mask cannot be scaled: its matrices fit its lengths");
  Workload out = *this;
  for (WorkloadNode& node : out.nodes) {
    if (node.tokens <= 0) continue;
    const double t = std::round(double(node.tokens) * factor);
    CODEC_CHECK(t < 0x1p62, "node '", clip(node.id), "' with ", node.tokens, " tokens scaled by ", factor,
                " overflows the token count");
    // Scaling must not turn a non-empty node into an empty one: that would change the tree's shape.
    node.tokens = std::max<std::int64_t>(1, std::int64_t(t));
  }
  return out;
}

Workload Workload::with_queries(int q_len_arg, int tree_width_arg, int tree_depth_arg) const {
  const bool tree = tree_width_arg > 0 || tree_depth_arg > 0;
  CODEC_CHECK(!tree || (tree_width_arg >= 1 && tree_depth_arg >= 1), "--tree ", tree_width_arg, ",",
              tree_depth_arg, ": width and depth must be >= 1");
  CODEC_CHECK(q_len_arg >= 1, "--q-len ", q_len_arg, " must be >= 1");
  CODEC_CHECK(!tree || q_len_arg == 1, "--q-len and --tree: give one (a tree's tokens are its width x depth)");
  const std::int64_t n = tree ? std::int64_t(tree_width_arg) * tree_depth_arg : q_len_arg;
  CODEC_CHECK(n <= 1 << 16, "query tokens a request ", n, " must be <= 65536");
  Workload out = *this;
  out.q_len = int(n);
  out.tree_width = tree_width_arg, out.tree_depth = tree_depth_arg;
  if (n == 1) return out;
  // A node grows for its request where that request alone ends there and nothing hangs below it.
  std::vector<int> ending(nodes.size(), 0), children(nodes.size(), 0);
  for (const std::int32_t node : requests) ++ending[std::size_t(node)];
  for (const WorkloadNode& node : nodes)
    if (node.parent >= 0) ++children[std::size_t(node.parent)];
  for (std::size_t r = 0; r < requests.size(); ++r) {
    const auto node = std::size_t(requests[r]);
    if (ending[node] == 1 && children[node] == 0 && nodes[node].tokens > 0) {
      out.nodes[node].tokens += n - 1;
    } else {
      out.requests[r] = std::int32_t(out.nodes.size());
      out.nodes.push_back({nodes[node].id + "~q" + std::to_string(r), std::int32_t(node), n - 1});
    }
  }
  out.validate();
  return out;
}

}  // namespace codec
