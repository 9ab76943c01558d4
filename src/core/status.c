/* Status names/messages from the X-macro table and the thread-local "last error" message. */
#include "lpo/status.h"

#include <stdio.h>
#include <string.h>

static const char *const status_names[] = {
#define LPO__STATUS_NAME(name, msg) #name,
    LPO_STATUS_MAP(LPO__STATUS_NAME)
#undef LPO__STATUS_NAME
};
static const char *const status_msgs[] = {
#define LPO__STATUS_MSG(name, msg) msg,
    LPO_STATUS_MAP(LPO__STATUS_MSG)
#undef LPO__STATUS_MSG
};

static _Thread_local char last_msg[2048];
static _Thread_local lpo_status last_status;

const char *lpo_status_name(lpo_status st) {
    return (unsigned)st < LPO_STATUS_COUNT ? status_names[st] : "E_UNKNOWN";
}

const char *lpo_status_message(lpo_status st) {
    return (unsigned)st < LPO_STATUS_COUNT ? status_msgs[st] : "unknown status";
}

lpo_status lpo_verrorf(lpo_status st, const char *fmt, va_list ap) {
    /* Format into a scratch buffer first: callers may pass lpo_last_error() itself as an argument. */
    char msg[sizeof last_msg];
    vsnprintf(msg, sizeof msg, fmt, ap);
    memcpy(last_msg, msg, sizeof msg);
    last_status = st;
    return st;
}

lpo_status lpo_errorf(lpo_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    lpo_verrorf(st, fmt, ap);
    va_end(ap);
    return st;
}

lpo_status lpo_error_context(lpo_status st, const char *fmt, ...) {
    char prefix[512], old[sizeof last_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, last_msg, sizeof old);
    if (!old[0]) snprintf(old, sizeof old, "%s", lpo_status_message(st));
    /* "prefix: old", cut at the buffer's end (prefix is < 512 bytes, so it always fits) */
    size_t np = strlen(prefix), no = strlen(old);
    if (no > sizeof last_msg - np - 3) no = sizeof last_msg - np - 3;
    memcpy(last_msg, prefix, np);
    memcpy(last_msg + np, ": ", 2);
    memcpy(last_msg + np + 2, old, no);
    last_msg[np + 2 + no] = 0;
    last_status = st;
    return st;
}

const char *lpo_last_error(void) {
    return last_msg[0] ? last_msg : lpo_status_message(last_status);
}

void lpo_error_clear(void) {
    last_msg[0] = 0;
    last_status = LPO_OK;
}

int lpo_status_exit_code(lpo_status st) {
    switch (st) {
    case LPO_OK: return LPO_EXIT_OK;
    case LPO_E_USAGE:
    case LPO_E_CONFIG: return LPO_EXIT_USAGE;
    case LPO_E_NOT_AVAILABLE: return LPO_EXIT_NOT_AVAILABLE;
    default: return LPO_EXIT_FAIL;
    }
}
