#include "core/token_pattern.h"

#ifdef TOKENTRACE_HAVE_RE2
#include <re2/re2.h>
#endif

namespace tokentrace {

#ifdef TOKENTRACE_HAVE_RE2

std::unique_ptr<TokenPattern> TokenPattern::Compile(const std::string& pattern,
                                                    std::string* error) {
  RE2::Options options;
  options.set_log_errors(false);  // the caller says what was wrong, in one line
  options.set_max_mem(8 << 20);   // bounds the compiled program and the matcher's cache
  auto re = std::make_unique<RE2>(pattern, options);
  if (!re->ok()) {
    *error = re->error();
    return nullptr;
  }
  return std::unique_ptr<TokenPattern>(new TokenPattern(std::move(re)));
}

bool TokenPattern::FullMatch(const char* name, size_t len) const {
  return RE2::FullMatch(re2::StringPiece(name, len), *re_);
}

#else  // a build without RE2's headers (a machine with no package registry)

std::unique_ptr<TokenPattern> TokenPattern::Compile(const std::string&, std::string* error) {
  *error = "this build has no RE2 (install libre2-dev and rebuild to use token ranges)";
  return nullptr;
}

bool TokenPattern::FullMatch(const char*, size_t) const { return false; }

#endif

TokenPattern::TokenPattern(std::unique_ptr<re2::RE2> re) : re_(std::move(re)) {}
TokenPattern::~TokenPattern() = default;

}  // namespace tokentrace
