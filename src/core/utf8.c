/* UTF-8 decoding and validation shared by every module (config, report, tokenizer): one strict
 * decoder that rejects overlongs, surrogates, code points past U+10FFFF and truncated sequences. */
#include "lpo/core.h"

size_t lpo_utf8_decode(const char *str, size_t n, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)str;
    if (!n) return 0;
    uint32_t c = s[0], min;
    size_t len;
    if (c < 0x80) {
        if (cp) *cp = c;
        return 1;
    }
    if ((c & 0xe0) == 0xc0)
        len = 2, c &= 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0)
        len = 3, c &= 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0)
        len = 4, c &= 0x07, min = 0x10000;
    else
        return 0; /* continuation byte or 0xf8..0xff as a lead byte */
    if (len > n) return 0;
    // continuation bytes 10xxxxxx
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0; /* overlong, range, surrogate */
    if (cp) *cp = c;
    return len;
}

size_t lpo_utf8_valid_prefix(const char *s, size_t n) {
    size_t i = 0;
    // one character per step
    while (i < n) {
        size_t l = lpo_utf8_decode(s + i, n - i, NULL);
        if (!l) return i;
        i += l;
    }
    return n;
}

int lpo_utf8_valid(const char *s, size_t n) {
    return lpo_utf8_valid_prefix(s, n) == n;
}
