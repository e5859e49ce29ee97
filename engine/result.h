// Result<T>: the error path for everything a user, a file or a client can
// cause (bad model file, bad prompt, bad request). Bugs and driver faults do
// not come here: they abort with file:line (see VOLTAD_CHECK).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace voltad {

// A message that says what was wrong, where, and (where we know) what to do.
// `model_data`: the model file is the cause (a type or value the engine
// cannot run), not the machine; voltad then exits 65, which systemd does
// not restart, since trying again cannot help.
struct Error {
  std::string message;
  bool model_data = false;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error error) : v_(std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Result<void>: success or an error.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), failed_(true) {}
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool failed_ = false;
};

using Status = Result<void>;

inline Error make_error(std::string message) { return Error{std::move(message)}; }
inline Error model_data_error(std::string message) { return Error{std::move(message), true}; }

}  // namespace voltad

// Invariants that only a bug can break: print where, and abort.
#define VOLTAD_CHECK(cond)                                                        \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: internal error: check failed: %s\n", __FILE__, \
                   __LINE__, #cond);                                              \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

// Propagate an error from an expression returning Result<...>.
#define VOLTAD_TRY(expr)                          \
  do {                                            \
    auto voltad_try_status_ = (expr);             \
    if (!voltad_try_status_.ok())                 \
      return voltad_try_status_.error();          \
  } while (0)
