#pragma once
// Test support: asserts that a call throws codec::Error whose message names
// what went wrong.
#include <gtest/gtest.h>

#include <string>

#include "codec/core/error.hpp"

namespace codec::test {

template <typename F>
::testing::AssertionResult throws_with(F&& f, const std::string& needle) {
  try {
    f();
  } catch (const Error& e) {
    if (std::string(e.what()).find(needle) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "message '" << e.what() << "' lacks '" << needle << "'";
  }
  return ::testing::AssertionFailure() << "no codec::Error thrown";
}

}  // namespace codec::test
