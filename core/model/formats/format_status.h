// Early-return helpers for absl::Status in the file loaders, where nearly every line can fail.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define STRATA_FMT_CONCAT_INNER(a, b) a##b
#define STRATA_FMT_CONCAT(a, b) STRATA_FMT_CONCAT_INNER(a, b)

#define STRATA_FMT_RETURN_IF_ERROR(expr)         \
  do {                                           \
    ::absl::Status _strata_st = (expr);          \
    if (!_strata_st.ok()) return _strata_st;     \
  } while (0)

#define STRATA_FMT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                     \
  if (!tmp.ok()) return tmp.status();                    \
  lhs = std::move(tmp).value()

#define STRATA_FMT_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_FMT_ASSIGN_OR_RETURN_IMPL(STRATA_FMT_CONCAT(_strata_so_, __LINE__), lhs, expr)
