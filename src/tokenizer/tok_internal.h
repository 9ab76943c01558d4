/* Internals of the lpo tokenizers (src/tokenizer/): the tokenizer struct, its hash maps, the
 * normalizer / pre-tokenizer / decoder step lists, and the helpers shared by the loaders (tokenizer.json,
 * GGUF), the encoder and the decoder. Nothing here is public API. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "lpo/core.h"
#include "lpo/tokenizer.h"

/* Token ids are below this (4 Mi; the largest real vocabularies have a few hundred thousand). */
#define TOK_MAX_IDS (1 << 22)
/* Normalized text is at most TOK_NORM_GROWTH x the input + TOK_NORM_SLACK bytes (see tok_normalize). */
#define TOK_NORM_GROWTH 32
#define TOK_NORM_SLACK  (1 << 20)

/* ---- string pool + hash maps ------------------------------------------------------------------------ */
typedef struct {
    uint32_t off, len; /* bytes [off, off+len) of the tokenizer's pool */
} tok_str;

/* Open-addressing map from a byte string to an id; the key of an id is the tokenizer's raw[id] or
 * stored[id] string (use_raw), so slots hold only ids. Built once, after loading. */
typedef struct {
    uint32_t *slots; /* id + 1, 0 = empty */
    size_t cap;      /* power of two */
    int use_raw;
} tok_strmap;

/* Open-addressing map from an id pair to (rank, new id) of a BPE merge. */
typedef struct {
    uint64_t *keys; /* (a << 32 | b) + 1, 0 = empty */
    uint32_t *rank, *new_id;
    size_t cap, n;
} tok_pairmap;

uint64_t tok_hash_bytes(const void *p, size_t n);

/* ---- pipeline steps -------------------------------------------------------------------------------- */
typedef enum {
    NORM_NFC,
    NORM_NFD,
    NORM_NFKC,
    NORM_NFKD,
    NORM_LOWERCASE,
    NORM_PREPEND,
    NORM_REPLACE,
    NORM_STRIP
} norm_kind;
typedef enum {
    SPLIT_REMOVED,
    SPLIT_ISOLATED,
    SPLIT_MERGED_PREV,
    SPLIT_MERGED_NEXT,
    SPLIT_CONTIGUOUS
} split_behavior;

typedef struct {
    norm_kind kind;
    char *a, *b; /* prepend: a; replace: a -> b (a literal, or a regex when re is set) */
    pcre2_code *re;
    int left, right; /* strip */
} tok_norm;

typedef enum { PRE_SPLIT, PRE_BYTELEVEL, PRE_METASPACE } pre_kind;
typedef struct {
    pre_kind kind;
    pcre2_code *re;          /* split / bytelevel with use_regex */
    split_behavior behavior; /* split */
    int invert;              /* split */
    int add_prefix_space;    /* bytelevel */
    char replacement[8];     /* metaspace (UTF-8 of one char) */
    int prepend;             /* metaspace: 0 never, 1 always, 2 first */
    int split;               /* metaspace */
} tok_pre;

typedef enum { DEC_BYTELEVEL, DEC_REPLACE, DEC_BYTEFALLBACK, DEC_FUSE, DEC_STRIP, DEC_METASPACE } dec_kind;
typedef struct {
    dec_kind kind;
    char *a, *b;     /* replace a -> b */
    char content[8]; /* strip: the character; metaspace: the replacement */
    int start, stop; /* strip counts */
    int prepend;     /* metaspace: strips the leading space of the first token unless 0 */
} tok_dec;

typedef struct {
    tok_str content;
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
    char *norm_content; /* content after the normalizer (normalized tokens only), malloc'd */
    size_t norm_len;
} tok_added;

/* Per-id flags. */
enum { TF_SPECIAL = 1, TF_ADDED = 2, TF_BYTE = 4, TF_PRESENT = 8, TF_MODEL = 16 };

typedef enum { TOK_BYTE_LEVEL, TOK_SPM, TOK_BYTES } tok_kind;

struct lpo_tokenizer {
    tok_kind kind;
    char *origin; /* file name for messages */
    char *pool;
    size_t pool_len, pool_cap;
    int32_t n_vocab;      /* max id + 1 */
    tok_str *stored;      /* per id: the token's string as stored (GPT-2 alphabet for byte-level) */
    tok_str *raw;         /* per id: the bytes it stands for (byte-level decoded; "<0x41>" -> "A") */
    uint8_t *flags;       /* TF_* per id */
    uint8_t *byte_of;     /* TF_BYTE tokens: the byte value */
    tok_strmap by_raw;    /* model vocab: raw bytes -> id (the BPE's view) */
    tok_strmap by_stored; /* model vocab + added tokens: stored string -> id */
    tok_pairmap merges;
    int32_t unit_id[256]; /* byte-level: id of each byte's alphabet char; spm: id of <0xNN> (or -1) */
    int ignore_merges, byte_fallback, fuse_unk;
    int32_t unk_id;
    tok_added *added;
    size_t n_added;
    uint8_t added_first[2][256]; /* [normalized][byte]: some added token of that set starts with byte */
    tok_norm *norms;
    size_t n_norms, cap_norms;
    tok_pre *pres;
    size_t n_pres, cap_pres;
    tok_dec *decs;
    size_t n_decs, cap_decs;
    int32_t *prefix_ids, *suffix_ids; /* TemplateProcessing "single": specials before/after $A */
    size_t n_prefix, n_suffix, cap_prefix, cap_suffix;
    int32_t bos_id, eos_id;
    char *chat_template; /* malloc'd Jinja text, NULL when none (see lpo_tokenizer_chat_template) */
};

/* ---- shared helpers ----------------------------------------------------------------------------------- */
lpo_tokenizer *tok_new(tok_kind kind, const char *origin);
/* Appends bytes to the pool; returns their location. LPO_E_NOMEM on failure. */
lpo_status tok_pool_add(lpo_tokenizer *t, const char *s, size_t n, tok_str *out);
/* Grows the per-id tables to hold id (sets n_vocab). */
lpo_status tok_reserve_ids(lpo_tokenizer *t, int32_t id);
/* Sets the stored string of id (computes raw for byte-level tokenizers and <0xNN> pieces). added = 0 for a
 * model vocabulary entry, 1 for an added token (which may also be in the model vocabulary). */
lpo_status tok_set_token(lpo_tokenizer *t, int32_t id, const char *s, size_t n, int added);
/* Builds by_raw (model vocabulary; raw bytes for byte-level, stored strings for spm) and by_stored. */
lpo_status tok_build_maps(lpo_tokenizer *t);
/* Adds a merge pair (ids) with its rank and result. Later duplicates override earlier ones (like HF). */
lpo_status tok_add_merge(lpo_tokenizer *t, int32_t a, int32_t b, uint32_t rank, int32_t new_id);
/* Append one pipeline step or template id (arrays grow geometrically; out of memory goes to the handler). */
void tok_push_norm(lpo_tokenizer *t, const tok_norm *nm);
void tok_push_pre(lpo_tokenizer *t, const tok_pre *p);
void tok_push_dec(lpo_tokenizer *t, const tok_dec *d);
/* suffix: after the sequence ($A), else before it */
void tok_push_template_id(lpo_tokenizer *t, int suffix, int32_t id);
/* Finishes loading: unit ids, added-token normalization, bos/eos defaults. */
lpo_status tok_finish(lpo_tokenizer *t);

int32_t tok_map_get(const lpo_tokenizer *t, const tok_strmap *m, const char *s, size_t n);
int tok_pair_get(const tok_pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id);

/* Compiles a HF (Oniguruma) regex with PCRE2 (UTF, UCP, JIT); \s is widened to Oniguruma's set. */
lpo_status tok_regex_compile(const char *pattern, const char *origin, pcre2_code **out);
/* The GPT-2 pre-tokenizer regex used by ByteLevel(use_regex=true). */
extern const char tok_gpt2_regex[];

/* UTF-8: length of the character starting with byte c (1 for invalid lead bytes). */
static inline size_t tok_utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
}
/* Decodes one character (no validation: call on valid UTF-8); returns its length. */
size_t tok_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* A SentencePiece byte piece "<0xNN>" (hex, either case): 1 and *val = NN, else 0. */
int tok_byte_piece(const char *s, size_t n, uint8_t *val);
/* Unicode White_Space (what Rust's char::is_whitespace and regex \s accept). */
int tok_is_white_space(uint32_t c);
/* Appends s with invalid sequences replaced by U+FFFD (maximal subparts, like Rust from_utf8_lossy). */
void tok_utf8_lossy(lpo_strbuf *out, const char *s, size_t n);
/* Length of the valid prefix sequence starting at s (0 when s[0] cannot start one); *complete is set
 * when it is a whole character. */
size_t tok_utf8_prefix(const unsigned char *s, size_t n, int *complete);

/* Appends the bytes a GPT-2-alphabet string stands for; a string with a char outside the alphabet is
 * appended as is (HF's ByteLevel decoder). Returns 1 when it was mapped. */
int tok_bytelevel_to_raw(const char *s, size_t n, lpo_strbuf *out);

/* Normalizes s (the tokenizer's normalizer steps) into out (reset first). */
lpo_status tok_normalize(const lpo_tokenizer *t, const char *s, size_t n, lpo_strbuf *out);

void tok_free_steps(lpo_tokenizer *t);
