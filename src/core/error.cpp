#include "codec/core/error.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace codec {

namespace {

#ifdef NDEBUG
constexpr bool kDebugBuild = false;
#else
constexpr bool kDebugBuild = true;
#endif

// −1 until first asked: then from the environment (or the build type).
std::atomic<int> g_locations{-1};

}  // namespace

bool error_locations() {
  int on = g_locations.load(std::memory_order_relaxed);
  if (on < 0) {
    const char* env = std::getenv("CODEC_ERROR_LOCATIONS");
    on = env != nullptr ? std::strcmp(env, "0") != 0 : kDebugBuild;
    g_locations.store(on, std::memory_order_relaxed);
  }
  return on != 0;
}

void set_error_locations(bool on) { g_locations.store(on ? 1 : 0, std::memory_order_relaxed); }

std::size_t utf8_prefix(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return text.size();
  // Back off over a character's continuation bytes (10xxxxxx): never cut inside one.
  std::size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

std::string clip(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return std::string(text);
  return std::string(text.substr(0, utf8_prefix(text, limit))) + "...";
}

}  // namespace codec
