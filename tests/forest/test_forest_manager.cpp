#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "codec/core/error.hpp"
#include "codec/forest/forest.hpp"
#include "codec/forest/forest_manager.hpp"
#include "support/forest_signature.hpp"

namespace codec {
namespace {

using Tokens = std::vector<std::int32_t>;
using Pages = std::vector<std::int32_t>;
using Id = ForestManager::RequestId;

constexpr int kPageSizes[] = {1, 3, 7, 16};

Tokens iota_tokens(int n, std::int32_t first) {
  Tokens t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t[std::size_t(i)] = first + i;
  return t;
}

Tokens concat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Tokens prefix(const Tokens& t, int n) { return Tokens(t.begin(), t.begin() + n); }

Pages pages_of(const ForestManager& m, Id id) {
  const auto p = m.pages(id);
  return Pages(p.begin(), p.end());
}

std::int64_t common_prefix(const Tokens& a, const Tokens& b) {
  return std::ranges::mismatch(a, b).in1 - a.begin();
}

template <typename F>
void expect_error(F&& fn, const std::string& needle) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
    return;
  }
  ADD_FAILURE() << "no codec::Error thrown; expected one mentioning '" << needle << "'";
}

// A fake KV pool: every slot holds the token id whose "KV" it stores. Applying
// the effects the way a caller would, then reading every request's pages back,
// catches wrong copies, wrong write ranges and writes into shared pages.
class FakeKv {
 public:
  explicit FakeKv(const ForestManager& m)
      : m_(m), ps_(m.page_size()), slots_(std::size_t(m.num_pages() * m.page_size()), -1) {}

  void apply(Id id, const KvEffects& e) {
    for (const PageCopy& c : e.copies) {
      ASSERT_TRUE(c.num_tokens >= 1 && c.num_tokens <= ps_) << "copy of " << c.num_tokens << " tokens";
      ASSERT_NE(c.src, c.dst);
      EXPECT_GT(m_.ref_count(c.src), 0) << "copy from free page " << c.src;
      EXPECT_EQ(m_.ref_count(c.dst), 1) << "copy into shared page " << c.dst;
      std::copy_n(slots_.begin() + slot(c.src, 0), c.num_tokens, slots_.begin() + slot(c.dst, 0));
    }
    const auto tokens = m_.tokens(id);
    const auto pages = m_.pages(id);
    ASSERT_TRUE(0 <= e.write_begin && e.write_begin <= e.write_end) << e.write_begin << ", " << e.write_end;
    ASSERT_EQ(e.write_end, std::int64_t(tokens.size()));
    for (std::int64_t t = e.write_begin; t < e.write_end; ++t) {
      const std::int32_t page = pages[std::size_t(t / ps_)];
      EXPECT_EQ(m_.ref_count(page), 1) << "token " << t << " written into shared page " << page;
      slots_[slot(page, int(t % ps_))] = tokens[std::size_t(t)];
    }
  }

  ::testing::AssertionResult holds_all() const {
    for (Id id : m_.live_requests()) {
      const auto tokens = m_.tokens(id);
      const auto pages = m_.pages(id);
      for (std::size_t t = 0; t < tokens.size(); ++t) {
        const std::int32_t got = slots_[slot(pages[t / std::size_t(ps_)], int(t % std::size_t(ps_)))];
        if (got != tokens[t])
          return ::testing::AssertionFailure() << "request " << id << " token " << t << " is " << tokens[t]
                                               << " but its KV slot holds " << got;
      }
    }
    return ::testing::AssertionSuccess();
  }

 private:
  std::size_t slot(std::int32_t page, int t) const { return std::size_t(page) * std::size_t(ps_) + std::size_t(t); }

  const ForestManager& m_;
  int ps_;
  std::vector<std::int32_t> slots_;
};

// Everything observable, to check that a failed operation changed nothing.
struct Snapshot {
  std::vector<Id> ids;
  std::vector<Tokens> tokens;
  std::vector<Pages> pages;
  std::vector<std::int32_t> refs;
  std::int64_t free_pages;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const ForestManager& m) {
  Snapshot s{m.live_requests(), {}, {}, {}, m.free_pages()};
  for (Id id : s.ids) {
    const auto t = m.tokens(id);
    s.tokens.emplace_back(t.begin(), t.end());
    s.pages.push_back(pages_of(m, id));
  }
  for (std::int32_t p = 0; p < m.num_pages(); ++p) s.refs.push_back(m.ref_count(p));
  return s;
}

// Checks the manager against the test's shadow model of live token lists.
void check_state(const ForestManager& m, const std::map<Id, Tokens>& shadow) {
  const int ps = m.page_size();
  std::vector<Id> ids;
  for (const auto& [id, t] : shadow) ids.push_back(id);
  ASSERT_EQ(m.live_requests(), ids);
  std::vector<std::int32_t> refs(std::size_t(m.num_pages()), 0);
  std::map<std::int32_t, std::pair<std::size_t, std::int64_t>> where;  // page → (path index, fill)
  for (const auto& [id, want] : shadow) {
    ASSERT_TRUE(m.alive(id));
    const auto got = m.tokens(id);
    ASSERT_TRUE(std::ranges::equal(got, want)) << "tokens of request " << id;
    const auto pages = m.pages(id);
    ASSERT_EQ(std::int64_t(pages.size()), (std::int64_t(want.size()) + ps - 1) / ps) << "request " << id;
    for (std::size_t k = 0; k < pages.size(); ++k) {
      ASSERT_TRUE(pages[k] >= 0 && pages[k] < m.num_pages()) << "request " << id << " page " << pages[k];
      ++refs[std::size_t(pages[k])];
      const std::int64_t fill = k + 1 < pages.size() ? ps : std::int64_t(want.size()) - std::int64_t(k) * ps;
      // Sharing only at the same position and fill keeps every page table standard.
      const auto [it, fresh] = where.try_emplace(pages[k], k, fill);
      EXPECT_EQ(it->second, std::make_pair(k, fill)) << "page " << pages[k] << " held by request " << id;
    }
  }
  std::int64_t used = 0;
  for (std::int32_t p = 0; p < m.num_pages(); ++p) {
    EXPECT_EQ(m.ref_count(p), refs[std::size_t(p)]) << "page " << p;
    used += refs[std::size_t(p)] > 0;
  }
  EXPECT_EQ(m.free_pages(), m.num_pages() - used) << "pages neither free nor referenced";

  const ForestManager::Tables t = m.page_tables();
  ASSERT_EQ(t.ids, ids);
  ASSERT_EQ(t.indptr.size(), ids.size() + 1);
  for (std::size_t r = 0; r < ids.size(); ++r) {
    const Pages want = pages_of(m, ids[r]);
    EXPECT_EQ(Pages(t.indices.begin() + t.indptr[r], t.indices.begin() + t.indptr[r + 1]), want);
    const std::int64_t n = std::int64_t(shadow.at(ids[r]).size());
    EXPECT_EQ(t.last_page_len[r], n - (std::int64_t(want.size()) - 1) * ps) << "request " << ids[r];
  }
  if (!ids.empty()) {
    EXPECT_NO_THROW(t.view(m.num_pages(), ps).validate());
  }
}

// Maximal runs, checked without derive_forest: a node whose only child has the
// same requests should have been one node with it.
void expect_maximal(const Forest& f) {
  std::vector<int> num_children(std::size_t(f.num_nodes()), 0), only_child(std::size_t(f.num_nodes()), -1);
  for (int i = 0; i < f.num_nodes(); ++i) {
    if (const int p = f.nodes[std::size_t(i)].parent; p >= 0) {
      ++num_children[std::size_t(p)];
      only_child[std::size_t(p)] = i;
    }
  }
  for (int i = 0; i < f.num_nodes(); ++i)
    if (num_children[std::size_t(i)] == 1) {
      EXPECT_NE(f.nodes[std::size_t(i)].num_reqs, f.nodes[std::size_t(only_child[std::size_t(i)])].num_reqs)
          << "node " << i << " and its only child hold the same requests";
    }
}

void expect_forest_agrees(const ForestManager& m) {
  const Forest f = m.forest();
  const ForestManager::Tables t = m.page_tables();
  if (t.ids.empty()) {
    EXPECT_TRUE(f.nodes.empty() && f.pages.empty() && f.reqs.empty() && f.request_node.empty());
    return;
  }
  ASSERT_NO_THROW(f.validate());
  expect_maximal(f);
  // Every request's path ends on its own last page and holds all its tokens.
  ASSERT_EQ(f.num_requests(), int(t.ids.size()));
  for (int r = 0; r < f.num_requests(); ++r) {
    const ForestNode& n = f.nodes[std::size_t(f.request_node[std::size_t(r)])];
    EXPECT_EQ(f.pages[std::size_t(n.page_begin + n.num_pages - 1)], t.indices[std::size_t(t.indptr[r + 1] - 1)])
        << "request " << t.ids[std::size_t(r)];
    EXPECT_EQ(f.request_tokens(r), std::int64_t(m.tokens(t.ids[std::size_t(r)]).size()));
  }
  const Forest d = derive_forest(t.view(m.num_pages(), m.page_size()));
  EXPECT_EQ(test::forest_signature(f), test::forest_signature(d));
}

// Random insert/fork/append/release with every result checked against a
// shadow model and a fake KV pool. Sequences come from a tiny alphabet and are
// mostly cut or extended from live ones, so that prefixes, mid-page
// divergences, duplicates and pool exhaustion are all frequent.
class RandomDriver {
 public:
  RandomDriver(int page_size, std::int64_t num_pages, std::uint32_t seed, int max_live)
      : m(page_size, num_pages), kv(m), rng_(seed), ps_(page_size), max_live_(max_live) {}

  ForestManager m;
  FakeKv kv;
  std::map<Id, Tokens> shadow;
  std::string last_op;
  int exhausted = 0, copies = 0, shared_inserts = 0;

  void step() {
    int choice = shadow.empty() ? 0 : uniform(0, 99);
    // Like a server under memory pressure: a refused operation evicts someone.
    if ((int(shadow.size()) >= max_live_ && choice < 40) || refused_) choice = 99;
    refused_ = false;
    if (choice < 25)
      insert();
    else if (choice < 40)
      fork();
    else if (choice < 88)
      append();
    else
      release();
  }

  void release_all() {
    while (!shadow.empty()) {
      m.release(shadow.begin()->first);
      shadow.erase(shadow.begin());
    }
  }

 private:
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  std::int32_t token() { return uniform(0, 2); }

  Id pick() { return std::next(shadow.begin(), uniform(0, int(shadow.size()) - 1))->first; }

  Tokens new_sequence() {
    Tokens t;
    if (!shadow.empty() && uniform(0, 9) < 7) {
      const Tokens& base = shadow.at(pick());
      t = prefix(base, uniform(0, int(base.size())));
    }
    const int extra = uniform(t.empty() ? 1 : 0, 2 * ps_ + 1);
    for (int i = 0; i < extra; ++i) t.push_back(token());
    return t;
  }

  void insert() {
    const Tokens t = new_sequence();
    const std::int64_t n = std::int64_t(t.size()), num_chunks = (n + ps_ - 1) / ps_;
    std::int64_t reuse = 0;
    bool identical = false;
    for (const auto& [id, s] : shadow) reuse = std::max(reuse, common_prefix(t, s)), identical |= s == t;
    const std::int64_t shared = reuse == n && (n % ps_ == 0 || identical) ? num_chunks : reuse / ps_;
    std::ostringstream os;
    os << "insert of " << n << " tokens, expected reuse " << reuse << ", shared pages " << shared;
    last_op = os.str();

    const Snapshot before = snapshot(m);
    KvEffects e;
    Id id;
    try {
      id = m.insert(t, &e);
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("exhausted"), std::string::npos) << err.what();
      EXPECT_GT(num_chunks - shared, before.free_pages) << "insert refused although pages were free";
      EXPECT_TRUE(snapshot(m) == before) << "failed insert changed the state";
      ++exhausted;
      refused_ = true;
      return;
    }
    EXPECT_EQ(e.write_begin, reuse) << "reused KV is not the longest live prefix";
    EXPECT_EQ(e.write_end, n);
    const Pages pages = pages_of(m, id);
    std::int64_t shared_got = 0;
    while (shared_got < std::int64_t(pages.size()) && m.ref_count(pages[std::size_t(shared_got)]) > 1) ++shared_got;
    EXPECT_EQ(shared_got, shared);
    EXPECT_EQ(before.free_pages - m.free_pages(), num_chunks - shared);
    if (reuse > shared * ps_) {
      ASSERT_EQ(e.copies.size(), 1u);
      EXPECT_EQ(e.copies[0].dst, pages[std::size_t(shared)]);
      EXPECT_EQ(e.copies[0].num_tokens, reuse - shared * ps_);
    } else {
      EXPECT_TRUE(e.copies.empty());
    }
    copies += int(e.copies.size());
    shared_inserts += shared > 0;
    kv.apply(id, e);
    shadow[id] = t;
  }

  void fork() {
    const Id src = pick();
    last_op = "fork of request " + std::to_string(src);
    const std::int64_t free_before = m.free_pages();
    const Id id = m.fork(src);
    EXPECT_EQ(pages_of(m, id), pages_of(m, src));
    EXPECT_EQ(m.free_pages(), free_before);
    shadow[id] = shadow.at(src);
  }

  void append() {
    const Id id = pick();
    const std::int32_t tok = token();
    last_op = "append to request " + std::to_string(id);
    const Pages pages = pages_of(m, id);
    const std::int32_t last = pages.back();
    const std::int64_t n = std::int64_t(shadow.at(id).size());
    const int fill = int(n - (std::int64_t(pages.size()) - 1) * ps_);
    const bool cow = fill < ps_ && m.ref_count(last) > 1;
    const Snapshot before = snapshot(m);
    KvEffects e;
    try {
      m.append(id, tok, &e);
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("exhausted"), std::string::npos) << err.what();
      EXPECT_TRUE((fill == ps_ || cow) && before.free_pages == 0) << "append refused although it needs no page";
      EXPECT_TRUE(snapshot(m) == before) << "failed append changed the state";
      ++exhausted;
      refused_ = true;
      return;
    }
    EXPECT_EQ(e.write_begin, n);
    EXPECT_EQ(e.write_end, n + 1);
    const Pages after = pages_of(m, id);
    if (fill == ps_) {
      EXPECT_EQ(Pages(after.begin(), after.end() - 1), pages) << "full pages must stay";
      EXPECT_TRUE(e.copies.empty());
    } else {
      ASSERT_EQ(after.size(), pages.size());
      EXPECT_TRUE(std::equal(pages.begin(), pages.end() - 1, after.begin())) << "only the last page may change";
      if (cow) {
        ASSERT_EQ(e.copies.size(), 1u);
        EXPECT_EQ(e.copies[0].src, last);
        EXPECT_EQ(e.copies[0].dst, after.back());
        EXPECT_EQ(e.copies[0].num_tokens, fill);
        EXPECT_NE(after.back(), last);
      } else {
        EXPECT_TRUE(e.copies.empty());
        EXPECT_EQ(after.back(), last) << "an unshared partial page is written in place";
      }
    }
    copies += int(e.copies.size());
    kv.apply(id, e);
    shadow[id].push_back(tok);
  }

  void release() {
    const Id id = pick();
    last_op = "release of request " + std::to_string(id);
    m.release(id);
    EXPECT_FALSE(m.alive(id));
    shadow.erase(id);
  }

  std::mt19937 rng_;
  int ps_;
  int max_live_;
  bool refused_ = false;
};

TEST(ForestManager, RejectsBadArguments) {
  expect_error([] { ForestManager(0, 8); }, "page_size 0");
  expect_error([] { ForestManager(4, 0); }, "num_pages 0");
  expect_error([] { ForestManager(4, std::int64_t(1) << 40); }, "num_pages 1099511627776");
  ForestManager m(4, 8);
  expect_error([&] { m.insert(Tokens{}); }, "tokens is empty");
  expect_error([&] { m.release(7); }, "request id 7 is not alive");
  expect_error([&] { m.append(-3, 1); }, "request id -3 is not alive");
  const Id id = m.insert(Tokens{1, 2, 3});
  m.release(id);
  const std::string dead = "request id " + std::to_string(id) + " is not alive";
  EXPECT_FALSE(m.alive(id));
  expect_error([&] { m.release(id); }, dead);
  expect_error([&] { m.fork(id); }, dead);
  expect_error([&] { m.append(id, 4); }, dead);
  expect_error([&] { m.pages(id); }, dead);
  expect_error([&] { m.tokens(id); }, dead);
  expect_error([&] { m.ref_count(-1); }, "page -1");
  expect_error([&] { m.ref_count(8); }, "page 8");
  EXPECT_EQ(m.free_pages(), 8);
}

TEST(ForestManager, InsertSharesWholePagesAndCopiesPartialOnes) {
  for (const int ps : kPageSizes) {
    SCOPED_TRACE("page_size " + std::to_string(ps));
    ForestManager m(ps, 64);
    FakeKv kv(m);
    KvEffects e;
    auto insert = [&](const Tokens& t) {
      const Id id = m.insert(t, &e);
      kv.apply(id, e);
      EXPECT_TRUE(kv.holds_all());
      return id;
    };
    const int half = ps / 2 + 1;  // fill of a's last page: partial unless ps == 1
    const Tokens a = iota_tokens(3 * ps + half, 100);
    const Id ia = insert(a);
    const Pages pa = pages_of(m, ia);
    EXPECT_EQ(pa.size(), 4u);
    EXPECT_EQ(e.write_begin, 0);
    EXPECT_TRUE(e.copies.empty());
    EXPECT_EQ(m.free_pages(), 60);

    // Identical sequence: every page shared, the partial last one too.
    const Id ib = insert(a);
    EXPECT_EQ(pages_of(m, ib), pa);
    EXPECT_EQ(e.write_begin, std::int64_t(a.size()));
    EXPECT_TRUE(e.copies.empty());
    for (std::int32_t p : pa) EXPECT_EQ(m.ref_count(p), 2);

    // Prefix ending on a page boundary: shares two pages, writes nothing.
    const Id ic = insert(prefix(a, 2 * ps));
    EXPECT_EQ(pages_of(m, ic), prefix(pa, 2));
    EXPECT_EQ(e.write_begin, 2 * ps);
    EXPECT_TRUE(e.copies.empty());
    EXPECT_EQ(m.free_pages(), 60);

    // Prefix ending inside a page that a holds more of: that page is copied.
    if (ps > 1) {
      const int d = ps / 2;
      const Id id = insert(prefix(a, 2 * ps + d));
      const Pages p = pages_of(m, id);
      EXPECT_EQ(prefix(p, 2), prefix(pa, 2));
      ASSERT_EQ(e.copies.size(), 1u);
      EXPECT_EQ(e.copies[0].src, pa[2]);
      EXPECT_EQ(e.copies[0].dst, p[2]);
      EXPECT_EQ(e.copies[0].num_tokens, d);
      EXPECT_EQ(e.write_begin, 2 * ps + d);
      EXPECT_EQ(e.write_end, 2 * ps + d);
      EXPECT_EQ(m.free_pages(), 59);
      m.release(id);
    }

    // Divergence inside a page: the matching tokens of that page are copied.
    const int j = ps - 1;
    const Id ie = insert(concat(prefix(a, 2 * ps + j), iota_tokens(ps + 1, -50)));
    const Pages pe = pages_of(m, ie);
    EXPECT_EQ(prefix(pe, 2), prefix(pa, 2));
    EXPECT_EQ(pe.size(), 4u);
    EXPECT_EQ(e.write_begin, 2 * ps + j);
    if (j > 0) {
      ASSERT_EQ(e.copies.size(), 1u);
      EXPECT_EQ(e.copies[0].src, pa[2]);
      EXPECT_EQ(e.copies[0].dst, pe[2]);
      EXPECT_EQ(e.copies[0].num_tokens, j);
    } else {
      EXPECT_TRUE(e.copies.empty());
    }

    // Divergence on a page boundary: nothing to copy.
    const Id iff = insert(concat(prefix(a, ps), iota_tokens(2, -80)));
    EXPECT_EQ(pages_of(m, iff)[0], pa[0]);
    EXPECT_NE(pages_of(m, iff)[1], pa[1]);
    EXPECT_EQ(e.write_begin, ps);
    EXPECT_TRUE(e.copies.empty());

    // Extension of a: its full pages are shared, its partial last page copied.
    const Id ig = insert(concat(a, iota_tokens(2 * ps, -200)));
    const Pages pg = pages_of(m, ig);
    EXPECT_EQ(e.write_begin, std::int64_t(a.size()));
    if (half < ps) {
      EXPECT_EQ(prefix(pg, 3), prefix(pa, 3));
      EXPECT_NE(pg[3], pa[3]);
      ASSERT_EQ(e.copies.size(), 1u);
      EXPECT_EQ(e.copies[0].src, pa[3]);
      EXPECT_EQ(e.copies[0].dst, pg[3]);
      EXPECT_EQ(e.copies[0].num_tokens, half);
    } else {
      EXPECT_EQ(prefix(pg, 4), pa);
      EXPECT_TRUE(e.copies.empty());
    }

    // Nothing in common.
    const Id ih = insert(iota_tokens(ps + 1, -1000));
    EXPECT_EQ(e.write_begin, 0);
    EXPECT_TRUE(e.copies.empty());
    for (std::int32_t p : pages_of(m, ih)) EXPECT_EQ(m.ref_count(p), 1);

    for (Id id : m.live_requests()) m.release(id);
    EXPECT_EQ(m.free_pages(), m.num_pages());
  }
}

TEST(ForestManager, InsertCopiesFromTheSiblingWithTheLongestMatch) {
  for (const int ps : {3, 7, 16}) {
    SCOPED_TRACE("page_size " + std::to_string(ps));
    ForestManager m(ps, 32);
    FakeKv kv(m);
    KvEffects e;
    const Tokens x = iota_tokens(ps, 0);
    const Id ia = m.insert(concat(x, {1, 2, 3}), &e);
    kv.apply(ia, e);
    const Id ib = m.insert(concat(x, {1, 9, 9}), &e);
    kv.apply(ib, e);
    const Id ic = m.insert(concat(x, {1, 2, 7}), &e);
    kv.apply(ic, e);
    ASSERT_EQ(e.copies.size(), 1u);
    EXPECT_EQ(e.copies[0].src, m.pages(ia)[1]);
    EXPECT_EQ(e.copies[0].num_tokens, 2);
    EXPECT_EQ(e.write_begin, ps + 2);
    const Id id = m.insert(concat(x, {1, 9, 5}), &e);
    kv.apply(id, e);
    ASSERT_EQ(e.copies.size(), 1u);
    EXPECT_EQ(e.copies[0].src, m.pages(ib)[1]);
    EXPECT_EQ(e.copies[0].num_tokens, 2);
    EXPECT_TRUE(kv.holds_all());
  }
}

// Two equal sibling pages (one request's copy-on-write of a page it shared)
// lead on to different last pages: one holding exactly the new sequence's
// last token, one holding more. Both reuse every token; the match that
// shares the whole last page must win over the one that copies it (longest
// reuse, then most shared pages), whichever sibling comes first.
TEST(ForestManager, InsertPrefersSharingALastPageToCopyingIt) {
  for (const bool exact_first : {true, false}) {
    SCOPED_TRACE(exact_first ? "exact last page on the first request" : "exact last page on the second");
    ForestManager m(4, 16);
    FakeKv kv(m);
    KvEffects e;
    const Id a = m.insert(Tokens{1, 2}, &e);
    kv.apply(a, e);
    const Id b = m.fork(a);
    auto append = [&](Id r, const Tokens& tokens) {
      for (const std::int32_t t : tokens) {
        m.append(r, t, &e);
        kv.apply(r, e);
      }
    };
    append(a, {3, 4});  // a copies the page it shares with b, then b writes into it alone
    append(b, {3, 4});
    ASSERT_NE(m.pages(a)[0], m.pages(b)[0]) << "two equal pages, not one";
    const Id exact = exact_first ? a : b, longer = exact_first ? b : a;
    append(exact, {9});
    append(longer, {9, 8});
    const Id c = m.insert(Tokens{1, 2, 3, 4, 9}, &e);
    kv.apply(c, e);
    EXPECT_TRUE(e.copies.empty()) << "copied a page it could share";
    EXPECT_EQ(m.pages(c).back(), m.pages(exact).back());
    EXPECT_EQ(m.ref_count(m.pages(c).back()), 2);
    EXPECT_TRUE(kv.holds_all());
  }
}

TEST(ForestManager, ForkSharesEveryPageAndAppendCopiesOnWrite) {
  for (const int ps : kPageSizes) {
    SCOPED_TRACE("page_size " + std::to_string(ps));
    ForestManager m(ps, 32);
    FakeKv kv(m);
    KvEffects e;
    const Tokens t = iota_tokens(2 * ps + 1, 10);
    const Id a = m.insert(t, &e);
    kv.apply(a, e);
    const Pages pa = pages_of(m, a);
    const std::int64_t free_before = m.free_pages();
    const Id b = m.fork(a);
    const Id c = m.fork(a);
    EXPECT_EQ(pages_of(m, b), pa);
    EXPECT_EQ(pages_of(m, c), pa);
    EXPECT_EQ(m.free_pages(), free_before);
    for (std::int32_t p : pa) EXPECT_EQ(m.ref_count(p), 3);

    int num_copies = 0;
    for (const Id id : {a, b, c}) {
      m.append(id, 7, &e);  // the same token on every branch: still distinct pages
      kv.apply(id, e);
      EXPECT_EQ(e.write_begin, 2 * ps + 1);
      EXPECT_EQ(e.write_end, 2 * ps + 2);
      num_copies += int(e.copies.size());
      ASSERT_TRUE(kv.holds_all());
    }
    const Pages qa = pages_of(m, a), qb = pages_of(m, b), qc = pages_of(m, c);
    EXPECT_EQ(prefix(qa, 2), prefix(pa, 2));
    EXPECT_NE(qa.back(), qb.back());
    EXPECT_NE(qa.back(), qc.back());
    EXPECT_NE(qb.back(), qc.back());
    for (const Pages* q : {&qa, &qb, &qc}) EXPECT_EQ(m.ref_count(q->back()), 1);
    // ps == 1: every page is full, so appends take new pages and copy nothing.
    // Otherwise the first two branches copy the shared page and the last one,
    // alone on it by then, writes in place.
    EXPECT_EQ(num_copies, ps == 1 ? 0 : 2);
    if (ps > 1) {
      EXPECT_EQ(qc.back(), pa.back());
    }

    // The forest: the shared full pages, then one leaf per branch.
    const Forest f = m.forest();
    ASSERT_EQ(f.num_nodes(), 4);
    EXPECT_EQ(f.nodes[0].num_pages, ps == 1 ? 3 : 2);
    EXPECT_EQ(f.nodes[0].num_reqs, 3);
    EXPECT_NO_THROW(f.validate());

    for (const Id id : {a, b, c}) m.release(id);
    EXPECT_EQ(m.free_pages(), m.num_pages());
  }
}

TEST(ForestManager, AppendAfterASharedFullPageStartsANewPage) {
  const int ps = 4;
  ForestManager m(ps, 8);
  FakeKv kv(m);
  KvEffects e;
  const Id a = m.insert(iota_tokens(2 * ps, 0), &e);
  kv.apply(a, e);
  const Id b = m.fork(a);
  m.append(b, 99, &e);
  kv.apply(b, e);
  EXPECT_TRUE(e.copies.empty());
  EXPECT_EQ(pages_of(m, a).size(), 2u);
  EXPECT_EQ(prefix(pages_of(m, b), 2), pages_of(m, a));
  EXPECT_EQ(pages_of(m, b).size(), 3u);
  // Appending fills the private page in place, then takes the next one.
  for (int i = 0; i < ps; ++i) {
    m.append(b, 100 + i, &e);
    kv.apply(b, e);
    EXPECT_TRUE(e.copies.empty());
  }
  EXPECT_EQ(pages_of(m, b).size(), 4u);
  EXPECT_TRUE(kv.holds_all());
}

TEST(ForestManager, PoolExhaustionLeavesTheStateUnchanged) {
  const int ps = 4;
  ForestManager m(ps, 3);
  const Id x = m.insert(iota_tokens(6, 0));  // two pages, the last partial
  const Id y = m.fork(x);
  Snapshot s = snapshot(m);
  expect_error([&] { m.insert(iota_tokens(9, 50)); }, "exhausted");
  EXPECT_TRUE(snapshot(m) == s);
  const Id z = m.insert(iota_tokens(4, 50));  // the last free page
  EXPECT_EQ(m.free_pages(), 0);
  // Sharing makes this fit: every page already exists.
  const Id w = m.insert(iota_tokens(6, 0));
  EXPECT_EQ(pages_of(m, w), pages_of(m, x));
  s = snapshot(m);
  // copy-on-write needs a page
  expect_error([&] { m.append(x, 1); }, "page pool exhausted: append to request id " + std::to_string(x));
  EXPECT_TRUE(snapshot(m) == s);
  expect_error([&] { m.append(z, 1); }, "exhausted");  // z's page is full
  EXPECT_TRUE(snapshot(m) == s);
  expect_error([&] { m.insert(concat(iota_tokens(4, 50), {1})); }, "exhausted");
  EXPECT_TRUE(snapshot(m) == s);

  m.release(z);
  m.release(w);
  KvEffects e;
  m.append(x, 1, &e);  // copy-on-write into the page z gave back
  EXPECT_EQ(e.copies.size(), 1u);
  m.append(y, 2, &e);  // y is alone on the old page now: in place
  EXPECT_TRUE(e.copies.empty());
  m.append(y, 3, &e);  // fills y's page, so the next token needs a new one
  expect_error([&] { m.append(y, 4); }, "exhausted");
  m.release(x);
  m.release(y);
  EXPECT_EQ(m.free_pages(), 3);
}

TEST(ForestManager, ForestCompressesChainsIntoMaximalRuns) {
  const int ps = 3;
  ForestManager m(ps, 32);
  const Tokens x = iota_tokens(5 * ps, 0);
  const Id a = m.insert(x);
  Forest f = m.forest();
  ASSERT_EQ(f.num_nodes(), 1);
  EXPECT_EQ(f.nodes[0].num_pages, 5);
  EXPECT_EQ(f.nodes[0].num_tokens, 5 * ps);

  // b ends where a goes on: a's path splits at b's end.
  const Id b = m.insert(prefix(x, 2 * ps));
  f = m.forest();
  ASSERT_EQ(f.num_nodes(), 2);
  EXPECT_EQ(f.nodes[0].num_pages, 2);
  EXPECT_EQ(f.nodes[0].num_reqs, 2);
  EXPECT_EQ(f.nodes[1].parent, 0);
  EXPECT_EQ(f.nodes[1].num_pages, 3);
  EXPECT_EQ(f.request_node, (std::vector<std::int32_t>{1, 0}));
  EXPECT_NO_THROW(f.validate());

  // Once b is gone, a's path is one run again.
  m.release(b);
  f = m.forest();
  ASSERT_EQ(f.num_nodes(), 1);
  EXPECT_EQ(f.nodes[0].num_pages, 5);
  m.release(a);
  EXPECT_TRUE(m.forest().nodes.empty());
}

// 4 page sizes × 2 seeds × 12,500 = 100,000 random operations, every state checked.
TEST(ForestManager, RandomOpsKeepInvariantsKvContentAndLeakNothing) {
  constexpr int kOpsPerRun = 12500;
  for (const int ps : kPageSizes) {
    for (const std::uint32_t seed : {1u, 2u}) {
      RandomDriver d(ps, 24 + 48 / ps, seed, 16);
      for (int op = 0; op < kOpsPerRun; ++op) {
        d.step();
        SCOPED_TRACE("page_size " + std::to_string(ps) + " seed " + std::to_string(seed) + " op " +
                     std::to_string(op) + ": " + d.last_op);
        check_state(d.m, d.shadow);
        EXPECT_TRUE(d.kv.holds_all());
        if (::testing::Test::HasFailure()) return;
      }
      SCOPED_TRACE("page_size " + std::to_string(ps) + " seed " + std::to_string(seed));
      // The workload must have reached the paths under test.
      EXPECT_GT(d.exhausted, 0);
      EXPECT_GT(d.shared_inserts, 0);
      if (ps > 1) {
        EXPECT_GT(d.copies, 0);
      }
      d.release_all();
      check_state(d.m, d.shadow);
      EXPECT_EQ(d.m.free_pages(), d.m.num_pages());
      EXPECT_TRUE(d.m.forest().nodes.empty());
    }
  }
}

TEST(ForestManager, ForestAgreesWithDeriveForest) {
  for (const int ps : kPageSizes) {
    for (const std::uint32_t seed : {11u, 12u, 13u}) {
      RandomDriver d(ps, 24 + 48 / ps, seed, 12);
      for (int op = 0; op < 800; ++op) {
        d.step();
        SCOPED_TRACE("page_size " + std::to_string(ps) + " seed " + std::to_string(seed) + " op " +
                     std::to_string(op) + ": " + d.last_op);
        expect_forest_agrees(d.m);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(ForestManager, RunsAreReproducible) {
  auto run = [](std::uint32_t seed) {
    RandomDriver d(3, 40, seed, 10);
    for (int op = 0; op < 500; ++op) d.step();
    const ForestManager::Tables t = d.m.page_tables();
    return std::make_tuple(t.ids, t.indptr, t.indices, t.last_page_len);
  };
  EXPECT_EQ(run(5), run(5));
}

}  // namespace
}  // namespace codec
