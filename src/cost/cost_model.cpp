#include "codec/cost/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "codec/core/error.hpp"
#include "core/json_input.hpp"

namespace codec {

// ---------------------------------------------------------------------------
// Roofline

RooflineParams RooflineParams::h200() {
  RooflineParams p;  // the H200's ceilings and block count by default
  // A task pays about two dependent HBM round trips (~0.6-0.8 us each) that its
  // KV stream cannot hide: reading its descriptor and query rows before the
  // first KV load issues, and storing its partial state at the end.
  p.task_overhead_us = 1.5;
  return p;
}

RooflineParams RooflineParams::cpu(int threads) {
  CODEC_CHECK(threads >= 1, "threads ", threads, " must be >= 1");
  RooflineParams p;
  // Per thread, as the CPU engine converts 16-bit tiles to fp32 and runs
  // vectorised dot products: far from the socket's peak, but the shape is right.
  p.bandwidth_gbps = 10.0 * threads;
  p.peak_tflops = 0.02 * threads;
  p.concurrent_blocks = threads;
  p.task_overhead_us = 0.5;  // dynamic dispatch of one work item, query conversion, state write
  return p;
}

RooflineCostModel::RooflineCostModel(const RooflineParams& params, const HeadConfig& heads, DType kv_dtype,
                                     std::optional<DType> q_dtype)
    : params_(params) {
  heads.validate();
  CODEC_CHECK(std::isfinite(params.bandwidth_gbps) && params.bandwidth_gbps > 0,
              "roofline bandwidth_gbps ", params.bandwidth_gbps, " must be > 0");
  CODEC_CHECK(std::isfinite(params.peak_tflops) && params.peak_tflops > 0, "roofline peak_tflops ",
              params.peak_tflops, " must be > 0");
  CODEC_CHECK(params.concurrent_blocks >= 1, "roofline concurrent_blocks ",
              params.concurrent_blocks, " must be >= 1");
  CODEC_CHECK(std::isfinite(params.task_overhead_us) && params.task_overhead_us >= 0,
              "roofline task_overhead_us ", params.task_overhead_us, " must be >= 0");
  const double d = heads.head_dim;
  const DType q = q_dtype.value_or(is_fp8(kv_dtype) ? DType::bf16 : kv_dtype);
  kv_bytes_per_token_ = 2 * d * static_cast<double>(dtype_size(kv_dtype));
  row_bytes_ = d * static_cast<double>(dtype_size(q)) + (d + 1) * 4;  // q row in; fp32 o and lse out
  flops_per_row_token_ = 4 * d;
}

double RooflineCostModel::cost_us(int rows, long kv_len) const {
  CODEC_CHECK(rows >= 1, "cost model: rows ", rows, " must be >= 1");
  CODEC_CHECK(kv_len >= 0, "cost model: kv_len ", kv_len, " must be >= 0");
  const double bytes = static_cast<double>(kv_len) * kv_bytes_per_token_ + rows * row_bytes_;
  const double flops =
      static_cast<double>(rows) * static_cast<double>(kv_len) * flops_per_row_token_;
  const double m = params_.concurrent_blocks;
  const double bytes_per_us = params_.bandwidth_gbps * 1e3 / m;  // GB/s = 1e3 B/us
  const double flops_per_us = params_.peak_tflops * 1e6 / m;     // TFLOP/s = 1e6 FLOP/us
  return std::max(bytes / bytes_per_us, flops / flops_per_us) + params_.task_overhead_us;
}

double RooflineCostModel::wide_cost_us(int rows, long kv_len, int span) const {
  // the same traffic and work as one task of `rows` rows, on span blocks' share of the device
  return (cost_us(rows, kv_len) - params_.task_overhead_us) / span + params_.task_overhead_us;
}

std::string RooflineCostModel::describe() const {
  std::ostringstream os;
  os << "roofline: " << params_.bandwidth_gbps << " GB/s, " << params_.peak_tflops
     << " TFLOP/s shared by " << params_.concurrent_blocks << " blocks, "
     << params_.task_overhead_us << " us/task; " << kv_bytes_per_token_ << " B KV/token, "
     << row_bytes_ << " B/row, " << flops_per_row_token_ << " FLOP/(row·token)";
  return os.str();
}

// ---------------------------------------------------------------------------
// Cost table

namespace {

using nlohmann::json;

// The dearest price a table may hold: far above any kernel (1,000 s), and low
// enough that interpolating and extrapolating over any axis stays finite.
constexpr double kMaxPriceUs = 1e9;

// Strictly increasing values ≥ 1, named `name`.
void validate_axis(const auto& v, const std::string& where, const std::string& name) {
  CODEC_CHECK(!v.empty(), where, ": ", name, " is empty");
  for (std::size_t i = 0; i < v.size(); ++i) {
    CODEC_CHECK(v[i] >= 1, where, ": ", name, "[", i, "] = ", v[i], " must be >= 1");
    CODEC_CHECK(i == 0 || v[i] > v[i - 1], where, ": ", name, "[", i, "] = ", v[i], " must be > ", name, "[",
                i - 1, "] = ", v[i - 1], " (strictly increasing)");
  }
}

// A task grid (us, one of busy_us, or wide_us over wide_rows) over `rows`
// and the table's kv_len, named `name`.
void validate_task_grid(const CostTable& t, const std::vector<std::vector<double>>& us, const std::string& where,
                        const std::string& name, const std::vector<int>& rows, const char* rows_name = "rows") {
  CODEC_CHECK(us.size() == rows.size(), where, ": ", name, " has ", us.size(), " rows, expected ", rows.size(),
              " (one per ", rows_name, " entry)");
  for (std::size_t i = 0; i < us.size(); ++i) {
    CODEC_CHECK(us[i].size() == t.kv_len.size(), where, ": ", name, "[", i, "] has ", us[i].size(),
                " values, expected ", t.kv_len.size(), " (one per kv_len entry)");
    for (std::size_t j = 0; j < us[i].size(); ++j)
      CODEC_CHECK(us[i][j] > 0 && us[i][j] <= kMaxPriceUs, where, ": ", name, "[", i, "][", j, "] = ", us[i][j],
                  " must be in (0, ", kMaxPriceUs, "] us");
  }
}

// `where` prefixes every message ("cost table t.json") so errors name the file.
void validate_table(const CostTable& t, const std::string& where) {
  CODEC_CHECK(t.head_dim == 64 || t.head_dim == 128 || t.head_dim == 256, where,
              ": head_dim = ", t.head_dim, " is unsupported (supported: 64, 128, 256)");
  validate_axis(t.rows, where, "rows");
  validate_axis(t.kv_len, where, "kv_len");
  validate_task_grid(t, t.us, where, "us", t.rows);
  if (!t.wide_rows.empty() || !t.wide_us.empty()) {
    validate_axis(t.wide_rows, where, "wide_rows");
    validate_task_grid(t, t.wide_us, where, "wide_us", t.wide_rows, "wide_rows");
  }
  // The busy grids: all three fields or none.
  if (t.blocks != 0 || !t.busy_blocks.empty() || !t.busy_us.empty()) {
    CODEC_CHECK(t.blocks >= 2 && !t.busy_blocks.empty(), where, ": blocks (", t.blocks, "), busy_blocks and "
                "busy_us come together, with blocks >= 2 (", t.busy_blocks.size(), " and ", t.busy_us.size(),
                " entries)");
    for (std::size_t b = 0; b < t.busy_blocks.size(); ++b) {
      CODEC_CHECK(t.busy_blocks[b] >= 1 && t.busy_blocks[b] < t.blocks, where, ": busy_blocks[", b, "] = ",
                  t.busy_blocks[b], " must be in [1, blocks = ", t.blocks, ")");
      CODEC_CHECK(b == 0 || t.busy_blocks[b] > t.busy_blocks[b - 1], where, ": busy_blocks[", b, "] = ",
                  t.busy_blocks[b], " must be > busy_blocks[", b - 1, "] = ", t.busy_blocks[b - 1],
                  " (strictly increasing)");
    }
    CODEC_CHECK(t.busy_us.size() == t.busy_blocks.size(), where, ": busy_us has ", t.busy_us.size(),
                " grids, expected ", t.busy_blocks.size(), " (one per busy_blocks entry)");
    for (std::size_t b = 0; b < t.busy_us.size(); ++b)
      validate_task_grid(t, t.busy_us[b], where, "busy_us[" + std::to_string(b) + "]", t.rows);
  }
  // The merge grid: all three fields or none.
  const bool merge = !t.merge_rows.empty() || !t.merge_partials.empty() || !t.merge_us.empty();
  if (!merge) return;
  CODEC_CHECK(!t.merge_rows.empty() && !t.merge_partials.empty(), where,
              ": merge_rows, merge_partials and merge_us come together (", t.merge_rows.size(), ", ",
              t.merge_partials.size(), " and ", t.merge_us.size(), " entries)");
  for (std::size_t i = 0; i < t.merge_rows.size(); ++i) {
    CODEC_CHECK(t.merge_rows[i] >= 1, where, ": merge_rows[", i, "] = ", t.merge_rows[i], " must be >= 1");
    CODEC_CHECK(i == 0 || t.merge_rows[i] > t.merge_rows[i - 1], where, ": merge_rows[", i, "] = ",
                t.merge_rows[i], " must be > merge_rows[", i - 1, "] = ", t.merge_rows[i - 1],
                " (strictly increasing)");
  }
  for (std::size_t j = 0; j < t.merge_partials.size(); ++j) {
    CODEC_CHECK(t.merge_partials[j] >= 2, where, ": merge_partials[", j, "] = ", t.merge_partials[j],
                " must be >= 2 (a row with one partial does not merge)");
    CODEC_CHECK(j == 0 || t.merge_partials[j] > t.merge_partials[j - 1], where, ": merge_partials[", j, "] = ",
                t.merge_partials[j], " must be > merge_partials[", j - 1, "] = ", t.merge_partials[j - 1],
                " (strictly increasing)");
  }
  CODEC_CHECK(t.merge_us.size() == t.merge_rows.size(), where, ": merge_us has ", t.merge_us.size(),
              " rows, expected ", t.merge_rows.size(), " (one per merge_rows entry)");
  for (std::size_t i = 0; i < t.merge_us.size(); ++i) {
    CODEC_CHECK(t.merge_us[i].size() == t.merge_partials.size(), where, ": merge_us[", i, "] has ",
                t.merge_us[i].size(), " values, expected ", t.merge_partials.size(),
                " (one per merge_partials entry)");
    for (std::size_t j = 0; j < t.merge_us[i].size(); ++j)
      CODEC_CHECK(t.merge_us[i][j] >= 0 && t.merge_us[i][j] <= kMaxPriceUs, where, ": merge_us[", i, "][", j,
                  "] = ", t.merge_us[i][j], " must be in [0, ", kMaxPriceUs, "] us");
  }
}

const json& field(const json& doc, const char* name, const std::string& where) {
  const auto it = doc.find(name);
  CODEC_CHECK(it != doc.end(), where, ": missing field '", name, "'");
  return *it;
}

template <typename Int>
Int integer(const json& value, const std::string& where, const std::string& name) {
  CODEC_CHECK(value.is_number_integer(), where, ": ", name, " = ", json_preview(value),
              " must be an integer");
  if (value.is_number_unsigned()) {
    const auto v = value.get<std::uint64_t>();
    CODEC_CHECK(v <= static_cast<std::uint64_t>(std::numeric_limits<Int>::max()), where, ": ", name,
                " = ", v, " is too large");
    return static_cast<Int>(v);
  }
  const auto v = value.get<std::int64_t>();
  CODEC_CHECK(v >= std::numeric_limits<Int>::min() && v <= std::numeric_limits<Int>::max(), where,
              ": ", name, " = ", v, " is out of range");
  return static_cast<Int>(v);
}

template <typename Int>
std::vector<Int> integers(const json& doc, const char* name, const std::string& where) {
  const json& array = field(doc, name, where);
  CODEC_CHECK(array.is_array(), where, ": ", name, " must be an array, got ", array.type_name());
  std::vector<Int> out;
  out.reserve(array.size());
  for (std::size_t i = 0; i < array.size(); ++i)
    out.push_back(integer<Int>(array[i], where, std::string(name) + "[" + std::to_string(i) + "]"));
  return out;
}

// The grid g, called `name` in messages.
std::vector<std::vector<double>> grid(const json& g, const std::string& where, const std::string& name) {
  CODEC_CHECK(g.is_array(), where, ": ", name, " must be an array of arrays, got ", g.type_name());
  std::vector<std::vector<double>> out;
  for (std::size_t i = 0; i < g.size(); ++i) {
    CODEC_CHECK(g[i].is_array(), where, ": ", name, "[", i, "] must be an array, got ", g[i].type_name());
    std::vector<double>& row = out.emplace_back();
    for (std::size_t j = 0; j < g[i].size(); ++j) {
      const json& v = g[i][j];
      CODEC_CHECK(v.is_number(), where, ": ", name, "[", i, "][", j, "] = ", json_preview(v), " must be a number");
      row.push_back(v.get<double>());
    }
  }
  return out;
}

}  // namespace

void CostTable::validate() const { validate_table(*this, "cost table"); }

CostTable CostTable::parse(const std::string& json_text, const std::string& source) {
  const std::string where = "cost table " + source;
  const json doc = parse_json_input(json_text, where);
  CODEC_CHECK(doc.is_object(), where, ": expected a JSON object, got ", doc.type_name());

  // Unknown fields are allowed so a profiler may record extra provenance
  // (command, date); every field the model uses is required.
  CostTable t;
  const json& device = field(doc, "device", where);
  CODEC_CHECK(device.is_string(), where, ": device = ", json_preview(device), " must be a string");
  t.device = device.get<std::string>();
  t.head_dim = integer<int>(field(doc, "head_dim", where), where, "head_dim");
  const json& dtype = field(doc, "dtype", where);
  CODEC_CHECK(dtype.is_string(), where, ": dtype = ", json_preview(dtype), " must be a string");
  try {
    t.dtype = parse_dtype(dtype.get<std::string>());
  } catch (const Error& e) {
    CODEC_FAIL(where, ": dtype: ", e.what());
  }
  // "group" (query heads per kv head at measurement time) is informational:
  // rows already count packed query heads, so it is checked but not kept.
  if (const auto group = doc.find("group"); group != doc.end())
    CODEC_CHECK(integer<int>(*group, where, "group") >= 1, where, ": group = ", json_preview(*group),
                " must be >= 1");
  t.rows = integers<int>(doc, "rows", where);
  t.kv_len = integers<long>(doc, "kv_len", where);
  t.us = grid(field(doc, "us", where), where, "us");
  if (doc.contains("merge_rows") || doc.contains("merge_partials") || doc.contains("merge_us")) {
    t.merge_rows = integers<std::int64_t>(doc, "merge_rows", where);
    t.merge_partials = integers<int>(doc, "merge_partials", where);
    t.merge_us = grid(field(doc, "merge_us", where), where, "merge_us");
  }
  if (doc.contains("wide_rows") || doc.contains("wide_us")) {
    t.wide_rows = integers<int>(doc, "wide_rows", where);
    t.wide_us = grid(field(doc, "wide_us", where), where, "wide_us");
  }
  if (doc.contains("blocks") || doc.contains("busy_blocks") || doc.contains("busy_us")) {
    t.blocks = integer<int>(field(doc, "blocks", where), where, "blocks");
    t.busy_blocks = integers<int>(doc, "busy_blocks", where);
    const json& grids = field(doc, "busy_us", where);
    CODEC_CHECK(grids.is_array(), where, ": busy_us must be an array of grids, got ", grids.type_name());
    for (std::size_t b = 0; b < grids.size(); ++b)
      t.busy_us.push_back(grid(grids[b], where, "busy_us[" + std::to_string(b) + "]"));
  }
  validate_table(t, where);
  return t;
}

CostTable CostTable::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CODEC_CHECK(in, "cost table ", path, ": cannot open file");
  std::ostringstream text;
  text << in.rdbuf();
  CODEC_CHECK(!in.bad(), "cost table ", path, ": read error");
  return parse(text.str(), path);
}

void CostTable::save(const std::string& path) const {
  validate_table(*this, "cost table " + path);
  json doc = {
      {"device", device}, {"head_dim", head_dim}, {"dtype", std::string(to_string(dtype))},
      {"rows", rows},     {"kv_len", kv_len},     {"us", us}};
  if (!merge_rows.empty()) {
    doc["merge_rows"] = merge_rows;
    doc["merge_partials"] = merge_partials;
    doc["merge_us"] = merge_us;
  }
  if (!wide_rows.empty()) {
    doc["wide_rows"] = wide_rows;
    doc["wide_us"] = wide_us;
  }
  if (!busy_blocks.empty()) {
    doc["blocks"] = blocks;
    doc["busy_blocks"] = busy_blocks;
    doc["busy_us"] = busy_us;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  CODEC_CHECK(out, "cost table ", path, ": cannot open file for writing");
  out << doc.dump(2) << '\n';  // doubles are written with round-trip precision
  out.close();
  CODEC_CHECK(out, "cost table ", path, ": write error");
}

// ---------------------------------------------------------------------------
// Table model

TableCostModel::TableCostModel(CostTable table) : table_(std::move(table)) { table_.validate(); }

namespace {

// Slope used beyond the last kv_len column for table row i: the largest
// last-interval slope of rows 0..i, and never negative. Taking the running max
// keeps the extrapolation monotone in rows too (a row with more query rows
// never gets a flatter tail than a smaller one), so the planner never sees a
// task get cheaper by growing.
using Grid = std::vector<std::vector<double>>;

double tail_slope(const CostTable& t, const Grid& us, std::size_t i) {
  const std::size_t n = t.kv_len.size();
  if (n < 2) return 0;
  const double dk = static_cast<double>(t.kv_len[n - 1] - t.kv_len[n - 2]);
  double slope = 0;
  for (std::size_t r = 0; r <= i; ++r)
    slope = std::max(slope, (us[r][n - 1] - us[r][n - 2]) / dk);
  return slope;
}

// Cost of table row i at kv_len. Below the first column the first value is
// used: tasks that small are dominated by fixed overhead, and a flat start
// keeps the cost monotone. Between columns: linear. Beyond the last: linear
// with tail_slope.
double row_cost(const CostTable& t, const Grid& us, std::size_t i, long kv_len) {
  const std::vector<long>& k = t.kv_len;
  const std::vector<double>& u = us[i];
  if (kv_len <= k.front()) return u.front();
  if (kv_len >= k.back())
    return u.back() + tail_slope(t, us, i) * static_cast<double>(kv_len - k.back());
  const std::size_t j =
      static_cast<std::size_t>(std::upper_bound(k.begin(), k.end(), kv_len) - k.begin());
  const double w = static_cast<double>(kv_len - k[j - 1]) / static_cast<double>(k[j] - k[j - 1]);
  return u[j - 1] + w * (u[j] - u[j - 1]);
}

// A task's cost on grid us (the table's us or one of its busy_us). Rows
// outside the grid clamp: below, fewer rows than measured still pay the
// smallest measured task; above, the grid is expected to reach one query
// tile, and the planner splits larger tasks into tiles (docs/DESIGN.md §4).
// (wide_us over wide_rows likewise.)
double grid_cost(const CostTable& t, const Grid& us, int rows, long kv_len, const std::vector<int>& r) {
  CODEC_CHECK(rows >= 1, "cost model: rows ", rows, " must be >= 1");
  CODEC_CHECK(kv_len >= 0, "cost model: kv_len ", kv_len, " must be >= 0");
  if (rows <= r.front()) return row_cost(t, us, 0, kv_len);
  if (rows >= r.back()) return row_cost(t, us, r.size() - 1, kv_len);
  const std::size_t i =
      static_cast<std::size_t>(std::upper_bound(r.begin(), r.end(), rows) - r.begin());
  const double w = static_cast<double>(rows - r[i - 1]) / static_cast<double>(r[i] - r[i - 1]);
  const double lo = row_cost(t, us, i - 1, kv_len);
  return lo + w * (row_cost(t, us, i, kv_len) - lo);
}

}  // namespace

double TableCostModel::cost_us(int rows, long kv_len) const {
  return grid_cost(table_, table_.us, rows, kv_len, table_.rows);
}

double TableCostModel::wide_cost_us(int rows, long kv_len, int span) const {
  // a measured grid: the wide kernel as it ran on the device, at its span
  if (!prices_wide()) return CostModel::wide_cost_us(rows, kv_len, span);
  return grid_cost(table_, table_.wide_us, rows, kv_len, table_.wide_rows);
}

namespace {

// y(i) over the increasing xs at x: flat below xs, linear between, and beyond
// the last point linear with the last interval's slope, never negative. Only
// the y(i) that the interpolation uses are asked for.
double interpolate(const auto& xs, auto&& y, double x) {
  if (x <= double(xs.front())) return y(0);
  const std::size_t n = xs.size();
  if (x >= double(xs.back())) {
    const double last = y(n - 1);
    const double slope = n < 2 ? 0 : std::max(0.0, (last - y(n - 2)) / double(xs[n - 1] - xs[n - 2]));
    return last + slope * (x - double(xs.back()));
  }
  const std::size_t j = std::size_t(std::upper_bound(xs.begin(), xs.end(), x,
                                                     [](double v, auto e) { return v < double(e); }) - xs.begin());
  const double w = (x - double(xs[j - 1])) / double(xs[j] - xs[j - 1]), below = y(j - 1);
  return below + w * (y(j) - below);
}

}  // namespace

double TableCostModel::merge_us(std::int64_t rows, int partials) const {
  CODEC_CHECK(rows >= 1, "cost model: merge rows ", rows, " must be >= 1");
  CODEC_CHECK(partials >= 2, "cost model: merge partials ", partials, " must be >= 2");
  if (!prices_merge()) return 0;
  // over the rows, each merge_rows line at `partials` (the planner asks once per split vector it tries)
  return interpolate(table_.merge_rows, [&](std::size_t i) {
    const std::vector<double>& line = table_.merge_us[i];
    return interpolate(table_.merge_partials, [&](std::size_t j) { return line[j]; }, double(partials));
  }, double(rows));
}

double TableCostModel::cost_busy_us(int rows, long kv_len, int busy) const {
  CODEC_CHECK(busy >= 1, "cost model: busy blocks ", busy, " must be >= 1");
  const CostTable& t = table_;
  if (!prices_contention() || busy >= t.blocks) return cost_us(rows, kv_len);
  // over the busy counts busy_blocks..., then from the last of them to `blocks`, where every block is busy; never
  // dearer than that, where a measurement's noise would have it so
  const double all = cost_us(rows, kv_len);
  const int last = t.busy_blocks.back();
  if (busy >= last) {
    const double at_last = grid_cost(t, t.busy_us.back(), rows, kv_len, t.rows);
    const double w = double(busy - last) / double(t.blocks - last);
    return std::min(all, at_last + w * (all - at_last));
  }
  const auto at = [&](std::size_t b) { return grid_cost(t, t.busy_us[b], rows, kv_len, t.rows); };
  return std::min(all, interpolate(t.busy_blocks, at, double(busy)));
}

std::string TableCostModel::describe() const {
  const CostTable& t = table_;
  double lo = t.us[0][0], hi = t.us[0][0];
  for (const auto& row : t.us)
    for (double v : row) lo = std::min(lo, v), hi = std::max(hi, v);
  std::ostringstream os;
  os << "table '" << t.device << "' head_dim " << t.head_dim << ' ' << to_string(t.dtype)
     << ": rows " << t.rows.front() << ".." << t.rows.back() << " (" << t.rows.size()
     << " points) x kv_len " << t.kv_len.front() << ".." << t.kv_len.back() << " ("
     << t.kv_len.size() << " points), " << lo << ".." << hi << " us";
  if (prices_merge())
    os << "; merge: rows " << t.merge_rows.front() << ".." << t.merge_rows.back() << " x partials "
       << t.merge_partials.front() << ".." << t.merge_partials.back();
  if (prices_wide()) os << "; wide: rows " << t.wide_rows.front() << ".." << t.wide_rows.back();
  if (prices_contention()) {
    os << "; busy blocks";
    for (const int b : t.busy_blocks) os << ' ' << b;
    os << " of " << t.blocks;
  }
  return os.str();
}

}  // namespace codec
