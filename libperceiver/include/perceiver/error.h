// Errors: the library throws perceiver::Error and never exits.
//   PCV_CHECK(cond, parts...)  input, config and IO problems; the message names the file, key
//                              or value at fault. Parts are streamed (operator<<) into the message.
//   PCV_ASSERT(cond, parts...) invariants of our own code ("internal error").
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace perceiver {

/// The one exception type the library throws. what() starts with "file:line: ".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

template <class... Parts>
[[noreturn]] void throw_error(const char* file, int line, const char* kind, const Parts&... parts) {
  std::ostringstream os;
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  os << base << ':' << line << ": " << kind;
  if constexpr (sizeof...(Parts) > 0) (os << ... << parts);
  throw Error(os.str());
}

}  // namespace detail
}  // namespace perceiver

#define PCV_CHECK(cond, ...)                                                      \
  do {                                                                            \
    if (!(cond)) ::perceiver::detail::throw_error(__FILE__, __LINE__, "" __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

#define PCV_ASSERT(cond, ...)                                                                    \
  do {                                                                                           \
    if (!(cond))                                                                                 \
      ::perceiver::detail::throw_error(__FILE__, __LINE__, "internal error: (" #cond ") " __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

/// Throws unconditionally (for switch defaults and unreachable config branches).
#define PCV_FAIL(...) ::perceiver::detail::throw_error(__FILE__, __LINE__, "", __VA_ARGS__)
