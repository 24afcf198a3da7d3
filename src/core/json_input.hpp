#pragma once
// JSON a user was handed (workload files, cost tables): parsed under a nesting
// limit and quoted in messages by a bounded preview, so that no input, however
// deep or large, makes a reader recurse or copy in proportion to it.
// Internal to the library and its tools; never installed.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace codec {

// Far past any file the project reads (a workload is 3 levels deep, a cost
// table 4), far below what the recursion of nlohmann's serializer survives
// (about 50,000 levels on an 8 MB stack).
inline constexpr int kMaxJsonDepth = 64;

// The document in `text`, or codec::Error naming `source`: invalid JSON with
// its byte offset, or arrays and objects nested deeper than kMaxJsonDepth,
// refused as soon as the parser reaches that depth.
nlohmann::json parse_json_input(std::string_view text, const std::string& source);

// `value` as JSON text cut after about `limit` characters ("..." marks the
// cut), built without serialising the whole value: a message quoting a
// 100 MB array costs what quoting its first elements does.
std::string json_preview(const nlohmann::json& value, std::size_t limit = 60);

}  // namespace codec
