// Text helpers for what tokentrace writes out (JSON exports, reports): numbers with a fixed
// number of decimals, JSON string literals of names as the job gave them, UTF-8 checks.
#pragma once

#include <cstddef>
#include <string>

namespace tokentrace::text {

// A double with `decimals` decimals.
std::string Fixed(double v, int decimals);

// `s` as a JSON string literal, quotes included (control characters as \u00XX; valid UTF-8
// is passed through, and each byte that is not part of a valid sequence becomes U+FFFD).
std::string JsonString(const std::string& s);

// Length of the valid UTF-8 sequence (RFC 3629: shortest form, no surrogates, at most
// U+10FFFF) that starts at s[i], or 0 when the bytes there are not one.
size_t Utf8Length(const std::string& s, size_t i);

}  // namespace tokentrace::text
