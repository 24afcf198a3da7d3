#include "codec/forest/forest_manager.hpp"

#include <algorithm>
#include <deque>
#include <limits>
#include <optional>
#include <unordered_map>

#include "codec/core/error.hpp"

namespace codec {

namespace {

constexpr std::uint64_t kHashBase = 0x9e3779b97f4a7c15ull;

// Polynomial content hashes are weak in their low bits; bucket on a mixed key.
std::uint64_t bucket_key(std::uint64_t h) {
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 29);
}

}  // namespace

// The tree has one vertex per live page, so a vertex is named by its page id.
// A vertex's parent is the page before it in every request that holds it; the
// pages of a request are exactly its root→vertex path. A partial page never has
// children (a next page needs it full), so only requests ending there hold it.
// Children are indexed by a hash of their token content that a token append
// updates in O(1): appending to an unshared last page never rewalks the path.
struct ForestManager::Impl {
  using Children = std::unordered_multimap<std::uint64_t, std::int32_t>;  // bucket key → page

  struct Vertex {
    std::int32_t parent = -1;          // previous page on the path, −1 at the top
    std::int32_t ref = 0;              // live requests whose path holds the page
    std::int32_t ends = 0;             // live requests whose last page it is
    std::uint64_t hash = 0;            // Σ (token_i + 1) · kHashBase^i
    std::vector<std::int32_t> tokens;  // the page's content, 1..page_size tokens
    Children children;
  };

  struct Request {
    std::vector<std::int32_t> tokens;
    std::vector<std::int32_t> pages;
  };

  int page_size;
  std::int64_t num_pages;
  std::vector<std::uint64_t> powers;  // kHashBase^i for i < page_size
  // Pages [0, vertices.size()) have been used; the rest of the pool was never
  // touched, so construction costs nothing for large pools. A deque keeps
  // vertex references stable while fresh pages are taken.
  std::deque<Vertex> vertices;
  std::vector<std::int32_t> free_list;  // released pages, reused LIFO (deterministic)
  Children roots;
  std::unordered_map<RequestId, Request> requests;
  RequestId next_id = 0;

  Impl(int ps, std::int64_t np) : page_size(ps), num_pages(np), powers(std::size_t(ps)) {
    std::uint64_t p = 1;
    for (auto& x : powers) x = p, p *= kHashBase;
  }

  std::uint64_t content_hash(std::span<const std::int32_t> tokens) const {
    std::uint64_t h = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i) h += (std::uint64_t(std::uint32_t(tokens[i])) + 1) * powers[i];
    return h;
  }

  Children& children_of(std::int32_t parent) { return parent < 0 ? roots : vertices[parent].children; }
  const Children& children_of(std::int32_t parent) const {
    return parent < 0 ? roots : vertices[parent].children;
  }

  std::int64_t free_pages() const {
    return std::int64_t(free_list.size()) + num_pages - std::int64_t(vertices.size());
  }

  Request& request(RequestId id) {
    auto it = requests.find(id);
    CODEC_CHECK(it != requests.end(), "request id ", id, " is not alive");
    return it->second;
  }
  const Request& request(RequestId id) const {
    auto it = requests.find(id);
    CODEC_CHECK(it != requests.end(), "request id ", id, " is not alive");
    return it->second;
  }

  RequestId new_id() {
    CODEC_CHECK(next_id < std::numeric_limits<RequestId>::max(), "request id space exhausted after ", next_id,
                " requests");
    return next_id++;
  }

  // Where a new sequence attaches: `shared` whole pages ending at vertex `end`,
  // then optionally the first `copy.num_tokens` tokens of page `copy.src`.
  struct Match {
    std::int32_t end = -1;
    std::int64_t shared = 0;
    std::int64_t reused = 0;  // tokens whose KV is reused
    std::optional<PageCopy> copy;
  };

  // Longest reuse, then most shared pages. Exact page matches are hash
  // lookups; the walk branches only where equal siblings exist (two requests
  // that wrote the same tokens into distinct pages). Where a branch stops,
  // one scan of the siblings finds the longest run to copy from: divergence or
  // end inside a page.
  Match match(std::span<const std::int32_t> tokens) const {
    const std::int64_t ps = page_size;
    const std::int64_t n = std::int64_t(tokens.size());
    const std::int64_t num_chunks = (n + ps - 1) / ps;
    Match best;
    std::vector<std::pair<std::int32_t, std::int64_t>> stack{{-1, 0}};  // (vertex, pages matched)
    while (!stack.empty()) {
      const auto [vertex, k] = stack.back();
      stack.pop_back();
      Match here{vertex, k, k * ps, std::nullopt};
      if (k == num_chunks) {
        here.reused = n;
      } else {
        const auto chunk = tokens.subspan(std::size_t(k * ps), std::size_t(std::min(ps, n - k * ps)));
        const Children& children = children_of(vertex);
        bool exact = false;
        const auto [b, e] = children.equal_range(bucket_key(content_hash(chunk)));
        for (auto it = b; it != e; ++it) {
          if (!std::ranges::equal(vertices[it->second].tokens, chunk)) continue;
          stack.emplace_back(it->second, k + 1);
          exact = true;
        }
        if (exact) continue;  // a deeper match beats any copy at this depth
        std::int32_t longest = 0;
        for (const auto& [key, page] : children) {
          const auto& have = vertices[page].tokens;
          const auto len = std::int32_t(std::ranges::mismatch(have, chunk).in1 - have.begin());
          if (len > longest) longest = len, here.copy = PageCopy{page, -1, len};
        }
        here.reused += longest;
      }
      if (std::pair(here.reused, here.shared) > std::pair(best.reused, best.shared)) best = here;
    }
    return best;
  }

  void link(std::int32_t page) {
    const Vertex& v = vertices[page];
    children_of(v.parent).emplace(bucket_key(v.hash), page);
  }
  Children::iterator find_link(std::int32_t page) {
    Children& ch = children_of(vertices[page].parent);
    auto it = ch.find(bucket_key(vertices[page].hash));
    while (it->second != page) ++it;  // equal keys are adjacent
    return it;
  }
  void unlink(std::int32_t page) { children_of(vertices[page].parent).erase(find_link(page)); }
  // Moves the index entry to the vertex's new hash without reallocating it.
  void rekey(std::int32_t page, std::uint64_t hash) {
    Children& ch = children_of(vertices[page].parent);
    auto entry = ch.extract(find_link(page));
    vertices[page].hash = hash;
    entry.key() = bucket_key(hash);
    ch.insert(std::move(entry));
  }

  // Caller has checked that a page is free.
  std::int32_t take_page(std::int32_t parent, std::span<const std::int32_t> tokens) {
    std::int32_t page;
    if (!free_list.empty()) {
      page = free_list.back();
      free_list.pop_back();
    } else {
      page = std::int32_t(vertices.size());
      vertices.emplace_back();
    }
    Vertex& v = vertices[page];
    v.parent = parent;
    v.ref = 1;
    v.ends = 0;
    v.tokens.assign(tokens.begin(), tokens.end());  // keeps the capacity of earlier uses
    v.hash = content_hash(tokens);
    link(page);
    return page;
  }
};

ForestManager::ForestManager(int page_size, std::int64_t num_pages) {
  CODEC_CHECK(page_size >= 1, "page_size ", page_size, " must be >= 1");
  CODEC_CHECK(num_pages >= 1, "num_pages ", num_pages, " must be >= 1");
  // Page ids are int32 in page tables and forests.
  CODEC_CHECK(num_pages <= std::int64_t(std::numeric_limits<std::int32_t>::max()) + 1, "num_pages ", num_pages,
              " exceeds the int32 page id range");
  impl_ = std::make_unique<Impl>(page_size, num_pages);
}

ForestManager::~ForestManager() = default;

ForestManager::RequestId ForestManager::insert(std::span<const std::int32_t> tokens, KvEffects* effects) {
  Impl& m = *impl_;
  CODEC_CHECK(!tokens.empty(), "tokens is empty: a request needs at least one token");
  const std::int64_t ps = m.page_size;
  const std::int64_t n = std::int64_t(tokens.size());
  const std::int64_t num_chunks = (n + ps - 1) / ps;
  auto chunk = [&](std::int64_t k) {
    return tokens.subspan(std::size_t(k * ps), std::size_t(std::min(ps, n - k * ps)));
  };

  // Match without mutating, so that running out of pages changes nothing.
  Impl::Match match = m.match(tokens);
  const std::int64_t needed = num_chunks - match.shared;
  CODEC_CHECK(needed <= m.free_pages(), "page pool exhausted: inserting ", n, " tokens needs ", needed,
              " new pages, ", m.free_pages(), " of ", m.num_pages, " are free");

  const RequestId id = m.new_id();
  Impl::Request& req = m.requests[id];
  req.tokens.assign(tokens.begin(), tokens.end());
  req.pages.resize(std::size_t(match.shared));
  for (std::int32_t v = match.end, k = std::int32_t(match.shared); v >= 0; v = m.vertices[v].parent) {
    req.pages[std::size_t(--k)] = v;
    ++m.vertices[v].ref;
  }
  std::int32_t parent = match.end;
  for (std::int64_t k = match.shared; k < num_chunks; ++k) {
    const std::int32_t page = m.take_page(parent, chunk(k));
    if (k == match.shared && match.copy) match.copy->dst = page;
    req.pages.push_back(page);
    parent = page;
  }
  ++m.vertices[req.pages.back()].ends;

  if (effects) {
    effects->copies.clear();
    if (match.copy) effects->copies.push_back(*match.copy);
    effects->write_begin = match.reused;
    effects->write_end = n;
  }
  return id;
}

ForestManager::RequestId ForestManager::fork(RequestId id) {
  Impl& m = *impl_;
  const Impl::Request& src = m.request(id);
  const RequestId child = m.new_id();
  Impl::Request copy = src;
  for (std::int32_t page : copy.pages) ++m.vertices[page].ref;
  ++m.vertices[copy.pages.back()].ends;
  m.requests.emplace(child, std::move(copy));
  return child;
}

void ForestManager::append(RequestId id, std::int32_t token, KvEffects* effects) {
  Impl& m = *impl_;
  Impl::Request& req = m.request(id);
  const std::int32_t last = req.pages.back();
  Impl::Vertex& v = m.vertices[last];
  const std::int32_t fill = std::int32_t(v.tokens.size());
  std::optional<PageCopy> copy;
  if (fill == m.page_size) {  // full pages are immutable: start a new one below
    CODEC_CHECK(m.free_pages() > 0, "page pool exhausted: append to request id ", id, " needs a new page, 0 of ",
                m.num_pages, " are free");
    const std::int32_t page = m.take_page(last, std::span(&token, 1));
    --v.ends;
    m.vertices[page].ends = 1;
    req.pages.push_back(page);
  } else if (v.ref > 1) {  // partial and shared: copy-on-write into a sibling
    CODEC_CHECK(m.free_pages() > 0, "page pool exhausted: append to request id ", id,
                " needs a copy of its shared last page ", last, ", 0 of ", m.num_pages, " are free");
    std::vector<std::int32_t> content = v.tokens;
    content.push_back(token);
    const std::int32_t page = m.take_page(v.parent, content);
    --v.ref;
    --v.ends;
    m.vertices[page].ends = 1;
    req.pages.back() = page;
    copy = PageCopy{last, page, fill};
  } else {  // partial and private: write in place, re-index under the new content
    v.tokens.push_back(token);
    m.rekey(last, v.hash + (std::uint64_t(std::uint32_t(token)) + 1) * m.powers[std::size_t(fill)]);
  }
  const std::int64_t pos = std::int64_t(req.tokens.size());
  req.tokens.push_back(token);
  if (effects) {
    effects->copies.clear();
    if (copy) effects->copies.push_back(*copy);
    effects->write_begin = pos;
    effects->write_end = pos + 1;
  }
}

void ForestManager::release(RequestId id) {
  Impl& m = *impl_;
  Impl::Request& req = m.request(id);
  --m.vertices[req.pages.back()].ends;
  // Deepest first: a vertex's children are gone before the vertex itself.
  for (auto it = req.pages.rbegin(); it != req.pages.rend(); ++it) {
    Impl::Vertex& v = m.vertices[*it];
    if (--v.ref > 0) continue;
    m.unlink(*it);
    v.tokens.clear();
    m.free_list.push_back(*it);
  }
  m.requests.erase(id);
}

bool ForestManager::alive(RequestId id) const { return impl_->requests.contains(id); }

std::span<const std::int32_t> ForestManager::pages(RequestId id) const { return impl_->request(id).pages; }

std::span<const std::int32_t> ForestManager::tokens(RequestId id) const { return impl_->request(id).tokens; }

std::vector<ForestManager::RequestId> ForestManager::live_requests() const {
  std::vector<RequestId> ids;
  ids.reserve(impl_->requests.size());
  for (const auto& [id, req] : impl_->requests) ids.push_back(id);
  std::ranges::sort(ids);
  return ids;
}

int ForestManager::page_size() const { return impl_->page_size; }
std::int64_t ForestManager::num_pages() const { return impl_->num_pages; }
std::int64_t ForestManager::free_pages() const { return impl_->free_pages(); }

std::int32_t ForestManager::ref_count(std::int32_t page) const {
  CODEC_CHECK(page >= 0 && page < impl_->num_pages, "page ", page, " is outside [0, ", impl_->num_pages, ")");
  return page < std::int32_t(impl_->vertices.size()) ? impl_->vertices[page].ref : 0;
}

PageTable ForestManager::Tables::view(std::int64_t num_pages, int page_size) const {
  PageTable t;
  t.indptr = indptr;
  t.indices = indices;
  t.last_page_len = last_page_len;
  t.page_size = page_size;
  t.num_pages = num_pages;
  return t;
}

ForestManager::Tables ForestManager::page_tables() const {
  const Impl& m = *impl_;
  Tables t;
  t.ids = live_requests();
  t.indptr.reserve(t.ids.size() + 1);
  t.indptr.push_back(0);
  t.last_page_len.reserve(t.ids.size());
  std::int64_t total = 0;
  for (RequestId id : t.ids) total += std::int64_t(m.requests.at(id).pages.size());
  CODEC_CHECK(total <= std::numeric_limits<std::int32_t>::max(), "page tables hold ", total,
              " page entries, beyond the int32 indptr range");
  t.indices.reserve(std::size_t(total));
  for (RequestId id : t.ids) {
    const Impl::Request& req = m.requests.at(id);
    t.indices.insert(t.indices.end(), req.pages.begin(), req.pages.end());
    t.indptr.push_back(std::int32_t(t.indices.size()));
    t.last_page_len.push_back(std::int32_t(m.vertices[req.pages.back()].tokens.size()));
  }
  return t;
}

Forest ForestManager::forest() const {
  const Impl& m = *impl_;
  const std::vector<RequestId> ids = live_requests();
  Forest f;
  f.page_size = m.page_size;
  f.request_node.resize(ids.size());
  // A forest node is a maximal chain of vertices: it continues through a
  // vertex with one child where no request ends. Nodes are named by their
  // first page and created on first appearance along the requests in order,
  // so parents come first and every node's request list comes out ascending.
  std::unordered_map<std::int32_t, std::int32_t> node_of_head;
  node_of_head.reserve(std::size_t(m.num_pages - m.free_pages()));
  std::vector<std::int64_t> req_cursor;
  for (std::size_t r = 0; r < ids.size(); ++r) {
    const std::vector<std::int32_t>& pages = m.requests.at(ids[r]).pages;
    std::int32_t node = -1;
    for (std::size_t i = 0; i < pages.size();) {
      const auto [it, fresh] = node_of_head.try_emplace(pages[i], std::int32_t(f.nodes.size()));
      if (fresh) {
        ForestNode fn;
        fn.parent = node;
        fn.page_begin = std::int64_t(f.pages.size());
        std::size_t j = i;
        while (m.vertices[pages[j]].children.size() == 1 && m.vertices[pages[j]].ends == 0) ++j;
        f.pages.insert(f.pages.end(), pages.begin() + std::ptrdiff_t(i), pages.begin() + std::ptrdiff_t(j) + 1);
        fn.num_pages = std::int32_t(j - i + 1);
        const std::int64_t tokens =
            std::int64_t(fn.num_pages - 1) * m.page_size + std::int64_t(m.vertices[pages[j]].tokens.size());
        CODEC_CHECK(tokens <= std::numeric_limits<std::int32_t>::max(), "forest node of ", tokens,
                    " tokens exceeds the int32 num_tokens range");
        fn.num_tokens = std::int32_t(tokens);
        fn.num_reqs = m.vertices[pages[i]].ref;
        fn.req_begin = std::int64_t(f.reqs.size());
        f.reqs.resize(f.reqs.size() + std::size_t(fn.num_reqs));
        req_cursor.push_back(fn.req_begin);
        f.nodes.push_back(fn);
      }
      node = it->second;
      f.reqs[std::size_t(req_cursor[std::size_t(node)]++)] = std::int32_t(r);
      i += std::size_t(f.nodes[std::size_t(node)].num_pages);
    }
    f.request_node[r] = node;
  }
  return f;
}

}  // namespace codec
