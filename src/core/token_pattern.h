// The --token-range pattern. It runs on the job's thread, once per new range name (when the
// name is first interned), so it must be bounded whatever the pattern and the name: RE2
// matches in time linear in the name and memory bounded at compile time, with no recursion
// (std::regex backtracks: `(a+)+b` stalled a job for seconds on a 26-character name and
// `.*token.*` overflowed the stack on a 50,000-character one).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace re2 {
class RE2;
}

namespace tokentrace {

class TokenPattern {
 public:
  // nullptr with a one-line reason in *error when `pattern` is not accepted.
  static std::unique_ptr<TokenPattern> Compile(const std::string& pattern, std::string* error);
  ~TokenPattern();

  // True when the whole name matches.
  bool FullMatch(const char* name, size_t len) const;

  // What --token-range accepts, for messages and docs.
  static constexpr const char* kAccepted =
      "an RE2 regular expression (ECMAScript-like; no backreferences or lookaround) matched "
      "against the whole range name";

 private:
  explicit TokenPattern(std::unique_ptr<re2::RE2> re);
  std::unique_ptr<re2::RE2> re_;
};

}  // namespace tokentrace
