#include "cli/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tokentrace::cli {

using text::Utf8Length;

std::string Ms(int64_t ns) { return Fixed(static_cast<double>(ns) / 1e6, 3); }

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

double Mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

double Median(const std::vector<double>& sorted) {
  size_t n = sorted.size();
  if (n == 0) return 0;
  return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

std::string ForTerminal(const std::string& s, size_t max_chars, size_t* chars_out) {
  std::string out;
  size_t chars = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (chars == max_chars) {
      out += "\xE2\x80\xA6";  // U+2026: the rest is cut
      ++chars;
      break;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = Utf8Length(s, i);
    // C1 controls (U+0080..U+009F, 0xC2 0x80..0x9F) start escape sequences on some terminals.
    const bool c1 = n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0;
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // not UTF-8: U+FFFD
    } else if (c < 0x20 || c == 0x7F || c1) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c1 ? static_cast<unsigned char>(s[i + 1]) : c);
      out += hex;  // visible, and inert: ESC, newline, CR, ...
      i += n - 1;
    } else {
      out.append(s, i, n);
      i += n - 1;
    }
    ++chars;
  }
  if (chars_out != nullptr) *chars_out = chars;
  return out;
}

std::string FormatTable(const std::vector<std::vector<std::string>>& raw_rows,
                        const std::string& indent) {
  // Cells come from the file (names, meta values): made safe for the terminal, and widths
  // counted in characters.
  std::vector<std::vector<std::pair<std::string, size_t>>> rows;
  std::vector<size_t> width;
  for (const auto& raw : raw_rows) {
    auto& row = rows.emplace_back();
    for (const std::string& cell : raw) {
      size_t chars = 0;
      std::string text = ForTerminal(cell, kMaxCellChars, &chars);
      row.emplace_back(std::move(text), chars);
    }
    if (row.size() > width.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].second);
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) {
      std::string pad(width[c] - row[c].second, ' ');
      if (c > 0) line += "  ";
      line += c == 0 ? row[c].first + pad : pad + row[c].first;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string FormatKeyValues(const std::vector<std::pair<std::string, std::string>>& rows,
                            size_t width, const std::string& indent) {
  size_t key_width = 0;
  for (const auto& row : rows) key_width = std::max(key_width, row.first.size());
  const size_t column = indent.size() + key_width + 2;
  const size_t room = width > column + 20 ? width - column : 20;  // never a sliver of a column
  std::string out;
  for (const auto& [key, value] : rows) {
    std::string line = indent + key;
    size_t used = 0;  // characters of value on the current line
    size_t pos = 0;
    while (pos < value.size()) {
      size_t end = value.find(' ', pos);
      if (end == std::string::npos) end = value.size();
      const std::string word = value.substr(pos, end - pos);
      if (used == 0) {
        line += std::string(column - line.size(), ' ');
      } else if (used + 1 + word.size() > room) {
        out += line + "\n";
        line = std::string(column, ' ');
        used = 0;
      } else {
        line += ' ';
        ++used;
      }
      line += word;
      used += word.size();
      pos = end + 1;
    }
    out += line + "\n";
  }
  return out;
}

bool ParseU32(const std::string& s, uint32_t* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace tokentrace::cli
