/* lpo status codes and error messages.
 *
 * Every library function that can fail returns an lpo_status. Names and generic messages come from ONE
 * X-macro table (LPO_STATUS_MAP). The specific message (what, where, what to do) is recorded with
 * lpo_errorf(), which stores it in a thread-local buffer and returns the status, so the idiom is
 *     return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s' ends past the end of the file", path, name);
 * and callers print lpo_last_error(). */
#pragma once
#include <stdarg.h>

#define LPO_STATUS_MAP(X)                                                                                    \
    X(OK, "success")                                                                                         \
    X(E_NOMEM, "out of memory")                                                                              \
    X(E_IO, "input/output error")                                                                            \
    X(E_NOT_FOUND, "not found")                                                                              \
    X(E_PARSE, "parse error")                                                                                \
    X(E_FORMAT, "malformed or inconsistent file")                                                            \
    X(E_INVALID, "invalid argument")                                                                         \
    X(E_RANGE, "value out of range")                                                                         \
    X(E_UNSUPPORTED, "unsupported")                                                                          \
    X(E_CONFIG, "configuration error")                                                                       \
    X(E_USAGE, "usage error")                                                                                \
    X(E_NO_DEVICE, "no GPU available")                                                                       \
    X(E_CUDA, "CUDA error")                                                                                  \
    X(E_NOT_AVAILABLE, "not yet available")                                                                  \
    X(E_NUMERIC, "non-finite result (NaN or Inf)")                                                           \
    X(E_INTERNAL, "internal error")                                                                          \
    X(E_TIMEOUT, "timed out")

typedef enum {
#define LPO__STATUS_ENUM(name, msg) LPO_##name,
    LPO_STATUS_MAP(LPO__STATUS_ENUM)
#undef LPO__STATUS_ENUM
        LPO_STATUS_COUNT
} lpo_status;

/* "E_FORMAT" style name of a status (never NULL). */
const char *lpo_status_name(lpo_status st);
/* Generic one-line message of a status (never NULL). */
const char *lpo_status_message(lpo_status st);

/* Records a specific message for the calling thread and returns st. */
lpo_status lpo_errorf(lpo_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
lpo_status lpo_verrorf(lpo_status st, const char *fmt, va_list ap);
/* Prefixes the current message with "context: " (e.g. the file being loaded); returns st. */
lpo_status lpo_error_context(lpo_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last recorded message of this thread, or the generic message of the last status when none. */
const char *lpo_last_error(void);
/* Forgets the last message. */
void lpo_error_clear(void);

/* Process exit codes used by the CLI. */
enum { LPO_EXIT_OK = 0, LPO_EXIT_FAIL = 1, LPO_EXIT_USAGE = 2, LPO_EXIT_NOT_AVAILABLE = 3 };
/* Maps a status to the CLI exit code (usage/config errors -> 2, not available -> 3, else 1). */
int lpo_status_exit_code(lpo_status st);
