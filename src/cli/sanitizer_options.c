/* The sanitizer runtime's default options for every lpo executable (lpo, the tests, the fuzzers) of a
 * sanitizer build (make asan, make asan-clang, make fuzz); ASAN_OPTIONS in the environment still overrides
 * them. Linked into each executable by CMakeLists.txt (a module library's object would never be pulled in:
 * nothing calls it, the runtime looks it up).
 *
 * intercept_tls_get_addr=0: the runtimes of GCC 12 and clang 14 take a dynamic TLS block (the TLS of a
 * library loaded with dlopen, allocated by glibc with malloc) that starts 16 bytes past a multiple of 4096
 * for one of glibc < 2.25 and read the 16 bytes before it (the allocator's chunk header) as the block's
 * start and size. LeakSanitizer's scan at exit then reads that made-up range and the process dies
 * ("Tracer caught signal 11: addr=0x288", exit 1) although nothing leaked. libomp loads its OMPT tool
 * (libarcher.so, which brings libstdc++ and its TLS) and lpo loads libstdc++ to demangle kernel names, so
 * any run can hit it, and where the block lands moves with every allocation before it: one override more
 * or less decides whether a run crashes. Without the interceptor LeakSanitizer does not scan such blocks;
 * lpo keeps no heap pointer in a loaded library's TLS. tests/sanitizer/test_dtls.c places a block there. */
#if defined(__SANITIZE_ADDRESS__)
#define LPO_ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LPO_ASAN_BUILD 1
#endif
#endif

#ifdef LPO_ASAN_BUILD
const char *__asan_default_options(void);

__attribute__((used, visibility("default"))) const char *__asan_default_options(void) {
    return "intercept_tls_get_addr=0";
}
#else
typedef int lpo_no_sanitizer_options; /* ISO C: a translation unit declares something */
#endif
