// Text helpers of the subcommands: numbers, percentiles, aligned tables, terminal-safe text
// (and, from core/text.h, fixed decimals and JSON strings).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/text.h"

namespace tokentrace::cli {

using text::Fixed;
using text::JsonString;

// Nanoseconds as milliseconds with 3 decimals ("1.250").
std::string Ms(int64_t ns);

// Nearest-rank percentile (p in (0, 100]) of an ascending vector; 0 for an empty one.
double Percentile(const std::vector<double>& sorted, double p);
double Mean(const std::vector<double>& v);
// Median of an ascending vector (mean of the two middle values for an even size).
double Median(const std::vector<double>& sorted);

// A text table: the first row is the header; the first column is left-aligned, the others
// right-aligned (they hold numbers). Every line starts with `indent`.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows,
                        const std::string& indent = "  ");

// `key  value` lines, keys padded to the longest key and values left-aligned after them. A
// value that would pass column `width` is wrapped at spaces onto continuation lines indented
// to the value column (a single word longer than that, such as a path, stays whole).
std::string FormatKeyValues(const std::vector<std::pair<std::string, std::string>>& rows,
                            size_t width = 100, const std::string& indent = "  ");

// Text from a trace file (names, meta values) made safe to print: control characters (ESC,
// newlines, C1 controls) as visible \xNN, bytes that are not UTF-8 as U+FFFD, and cut after
// `max_chars` characters with a trailing "…". *chars (if given) is its length in characters.
constexpr size_t kMaxCellChars = 80;
std::string ForTerminal(const std::string& s, size_t max_chars = kMaxCellChars,
                        size_t* chars = nullptr);

// Parses a decimal unsigned integer that fits in uint32; false otherwise.
bool ParseU32(const std::string& s, uint32_t* out);

}  // namespace tokentrace::cli
