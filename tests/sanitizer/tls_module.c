/* A library with 16 bytes of thread-local storage, for tests/sanitizer/test_dtls.c: loaded with dlopen, its
 * block in a thread is dynamic TLS, which glibc allocates with malloc on the thread's first access. */
long *lpo_tls_module_addr(void);

static _Thread_local long var[2];

long *lpo_tls_module_addr(void) {
    return var;
}
