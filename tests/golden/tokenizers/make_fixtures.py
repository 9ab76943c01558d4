#!/usr/bin/env python3
"""Generates the tokenizer golden fixtures of lpo (tests/golden/tokenizers/) with HF `tokenizers`.

Writes, next to this script:
  corpus.json                   the hard strings (whitespace runs, contractions, digits, CJK, emoji ZWJ, ...)
  smollm2.tokenizer.json        SmolLM2-135M's byte-level BPE (from the GGUF via transformers; see below)
  llama3ish.tokenizer.json      a small byte-level BPE trained here with the Llama-3 regex, ignore_merges
  qwen2ish.tokenizer.json       the same merges behind the Qwen2 regex and an NFC normalizer
  spm_llama2.tokenizer.json     a small SentencePiece BPE (sentencepiece-trained) in Llama-2's HF layout
                                (normalizer Prepend+Replace, byte_fallback, decoder Replace/ByteFallback/Fuse/Strip)
  spm_mistral.tokenizer.json    the same vocabulary in Mistral's layout (Metaspace pre-tokenizer, prepend "first")
  spm_llama2.gguf               tokenizer-only GGUF (tokenizer.ggml.model = llama: tokens, scores, types)
  llama3ish.gguf                tokenizer-only GGUF (tokenizer.ggml.model = gpt2, pre = llama-bpe)
  expected/<name>.json          for every tokenizer, every corpus string and 200 random mixes of hard parts
                                (seeded): ids without and with special tokens, decode(ids) and
                                decode(ids, skip_special_tokens=True), all from HF tokenizers.

SmolLM2: transformers' GGUF converter keeps vocab and merges but drops the digit splitting of the real
SmolLM2 tokenizer.json (pre_tokenizer Sequence[Digits(individual_digits=True), ByteLevel]); this script puts
it back so that the fixture matches the published tokenizer (and llama.cpp's "smollm" pre-tokenizer).

Usage: make_fixtures.py [--gguf PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf]
Needs: tokenizers, transformers (+ gguf, for the SmolLM2 conversion), sentencepiece, gguf.
Training is deterministic for a given Python + library version; the committed files are the reference.
"""
import argparse
import inspect
import json
import os
import tempfile

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# ---- the hard strings ----------------------------------------------------------------------------------
CORPUS = [
    "",
    " ",
    "  ",
    "\t",
    "\n",
    "Hello world",
    " Hello world",
    "Hello  world",
    "  \n\n  ",
    "a\n\n\nb",
    "tabs\tand\t\ttabs \t mixed\t \n",
    "line one\r\nline two\r\n\r\nend",
    "trailing spaces   ",
    "   leading spaces",
    " " * 40 + "x" + " " * 37,
    "\n" * 20,
    " \t " * 30,
    "I'm you're he's she'd we'll they've can't won't it's",
    "I'M YOU'RE HE'S SHE'D WE'LL THEY'VE CAN'T",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D",
    "rock'n'roll 'quoted' \"double\" ''' '''s",
    "The long s: 'ſ and Kelvin 'K",
    "0 1 12 123 1234 12345 123456 1234567 12345678 123456789",
    "3.14159265358979 2,718,281,828 1e-10 0x1F 0b1010 -42 +7",
    "Version v1.2.3-rc4, pages 10-20, 50% of $1,234.56 (2024/01/31)",
    "٣٤٥ ١٢٣٤ ⅓ ½ ² ³ 𝟙𝟚𝟛 ①②",
    "日本語のテキストです。漢字、ひらがな、カタカナ。",
    "中文测试：你好，世界！这是一个句子。",
    "한국어 문장입니다. 안녕하세요!",
    "Ideographic\u3000space\u3000\u3000twice",
    "nbsp\u00a0here and\u2009thin\u2003em\u202fnarrow",
    "next line\u0085after and line\u2028sep para\u2029sep",
    "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom",
    "Emoji: 😀 👍🏽 ❤️ 🇫🇷 👨‍👩‍👧‍👦 🏳️‍🌈 🧑🏿‍💻",
    "😀😀😀😀😀",
    "e\u0301 a\u0300 o\u0308 n\u0303 Z\u0351\u0352\u0353 café naïve résumé",
    "\u1100\u1161\u11a8 Hangul jamo vs 각",
    "ﬁ ﬂ ﬀ Ⅻ ㎏ ＡＢＣ ｱｲｳ",
    "Ελληνικά, Русский текст, עברית, العربية, हिन्दी, ไทย",
    "Mixed: English日本語Русский123abc!?",
    "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n",
    "for (int i = 0; i < n; ++i) { a[i] += b[i] * 2; }",
    "#include <stdio.h>\nint main(void) {\n    printf(\"%d\\n\", 42);\n}\n",
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "https://example.com/path?q=1&r=two#frag user@example.org",
    "!!!??? ... --- === *** ### @@@ ~~~ ``` ||| \\\\ //",
    "a.b,c;d:e!f?g(h)i[j]k{l}m",
    "ALLCAPS lowercase CamelCase snake_case kebab-case",
    "The quick brown fox jumps over the lazy dog. " * 4,
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text<|endoftext|>",
    "<s>Hello</s> <s> spaced </s>",
    "<|begin_of_text|>Hello<|eot_id|>",
    "<unk> literal and <0x41> literal",
    "\u2581already has a meta space \u2581\u2581",
    "control\x01chars\x7f and \x1b[31mred",
]


def load_corpus():
    return list(CORPUS)


# ---- random strings (deterministic) ---------------------------------------------------------------------
RANDOM_POOLS = [
    " \t\n\r\u3000\u00a0\u0085\u2028\u200b\u2009",
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789\u0660\u0661\u0662\u0663\u00bd\u00b2\u2460",
    "'\"!?.,;:-_()[]{}<>/\\|@#$%^&*+=~`",
    "\u65e5\u672c\u8a9e\u4e2d\u6587\ud55c\uad6d\uc5b4\u3072\u3089\u304c\u306a\u30ab\u30bf",
    "\u00e9\u00e8\u00ea\u00eb\u00f1\u00fc\u00f6\u00e7\u00df\u017f\u212a\u03a3\u03c3\u03c2\u0410\u0411\u0436",
    "\u0301\u0308\u0327\u200d\ufe0f",
    "\U0001f600\U0001f44d\U0001f3fd\u2764\U0001f1eb\U0001f1f7\U0001f468\U0001f469\U0001f980\U0001f4bb",
    "\u2581",
]
RANDOM_WORDS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "the", " the", "Hello", "  ", "\n\n",
                "123456", "x" * 30]


def random_strings(specials, n=200, seed=1234):
    """Random mixes of the hard parts above (and the tokenizer's special tokens), for breadth."""
    import random
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.1 and specials:
                parts.append(rng.choice(specials))
            elif r < 0.35:
                parts.append(rng.choice(RANDOM_WORDS))
            else:
                pool = rng.choice(RANDOM_POOLS)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
        out.append("".join(parts))
    return out


def training_text():
    """English reference prose and docstrings from the Python standard library, plus the corpus."""
    import pydoc_data.topics as topics
    parts = [topics.topics[k] for k in sorted(topics.topics)]
    import collections, functools, json as js, re, string, textwrap
    for mod in (collections, functools, js, re, string, textwrap, argparse, inspect):
        parts.append(inspect.getsource(mod))
    parts.extend(CORPUS * 5)
    return parts


def write_json(path, obj, compact=False):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def save_tokenizer(tok, name):
    path = os.path.join(HERE, name)
    obj = json.loads(tok.to_str())
    write_json(path, obj, compact=True)
    return path


# ---- byte-level: SmolLM2 -------------------------------------------------------------------------------
def make_smollm2(gguf_path):
    from transformers import AutoTokenizer
    d, f = os.path.split(os.path.abspath(gguf_path))
    t = AutoTokenizer.from_pretrained(d, gguf_file=f)
    obj = json.loads(t.backend_tokenizer.to_str())
    obj["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ],
    }
    obj["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    tok = Tokenizer.from_str(json.dumps(obj))
    return save_tokenizer(tok, "smollm2.tokenizer.json")


# ---- byte-level: Llama-3-like and Qwen2-like -----------------------------------------------------------
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eot_id|>"]


def make_llama3ish():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4000, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[])
    tok.train_from_iterator(training_text(), trainer=trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in LLAMA3_SPECIALS])
    # a non-special added token with lstrip/rstrip, as some fine-tunes have
    tok.add_tokens([AddedToken("<tool>", special=False, normalized=False, lstrip=True, rstrip=True)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                       special_tokens=[("<|begin_of_text|>", bos)])
    p = save_tokenizer(tok, "llama3ish.tokenizer.json")

    obj = json.loads(tok.to_str())
    obj["normalizer"] = {"type": "NFC"}
    obj["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {"Regex": QWEN2_REGEX}
    obj["model"]["ignore_merges"] = False
    obj["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                             "use_regex": False}
    q = save_tokenizer(Tokenizer.from_str(json.dumps(obj)), "qwen2ish.tokenizer.json")
    return p, q


# ---- SentencePiece BPE ---------------------------------------------------------------------------------
def make_spm():
    import sentencepiece as spm
    from transformers.tokenization_utils_base import generate_merges
    with tempfile.TemporaryDirectory() as tmp:
        txt = os.path.join(tmp, "train.txt")
        with open(txt, "w", encoding="utf-8") as f:
            for p in training_text():
                for line in p.splitlines():
                    if line.strip():
                        f.write(line + "\n")
        spm.SentencePieceTrainer.train(
            input=txt, model_prefix=os.path.join(tmp, "spm"), vocab_size=2000, model_type="bpe",
            byte_fallback=True, split_digits=True, character_coverage=0.9995, add_dummy_prefix=True,
            normalization_rule_name="identity", remove_extra_whitespaces=False,
            allow_whitespace_only_pieces=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
            num_threads=1, minloglevel=2)
        sp = spm.SentencePieceProcessor(model_file=os.path.join(tmp, "spm.model"))
        n = sp.get_piece_size()
        pieces = [sp.id_to_piece(i) for i in range(n)]
        scores = [sp.get_score(i) for i in range(n)]
        types = []
        for i in range(n):
            if sp.is_unknown(i): types.append(2)
            elif sp.is_control(i): types.append(3)
            elif sp.is_byte(i): types.append(6)
            elif sp.is_unused(i): types.append(5)
            else: types.append(1)

    vocab = {p: i for i, p in enumerate(pieces)}
    merges = generate_merges(vocab)

    def build(mistral):
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                                   byte_fallback=True))
        if mistral:
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first",
                                                         split=False)
        else:
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                                   normalizers.Replace(" ", "\u2581")])
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                         decoders.Fuse(), decoders.Strip(" ", 1, 0)])
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                                for s in ("<unk>", "<s>", "</s>")])
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
        return tok

    a = save_tokenizer(build(False), "spm_llama2.tokenizer.json")
    b = save_tokenizer(build(True), "spm_mistral.tokenizer.json")

    import gguf
    w = gguf.GGUFWriter(os.path.join(HERE, "spm_llama2.gguf"), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return a, b


def make_llama3ish_gguf():
    import gguf
    obj = json.load(open(os.path.join(HERE, "llama3ish.tokenizer.json"), encoding="utf-8"))
    vocab = dict(obj["model"]["vocab"])
    for t in obj["added_tokens"]:
        vocab[t["content"]] = t["id"]
    n = max(vocab.values()) + 1
    toks = [""] * n
    for s, i in vocab.items():
        toks[i] = s
    special = {t["id"] for t in obj["added_tokens"] if t["special"]}
    user = {t["id"] for t in obj["added_tokens"] if not t["special"]}
    types = [3 if i in special else 4 if i in user else 1 for i in range(n)]
    merges = [m if isinstance(m, str) else m[0] + " " + m[1] for m in obj["model"]["merges"]]
    w = gguf.GGUFWriter(os.path.join(HERE, "llama3ish.gguf"), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(toks)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab["<|begin_of_text|>"])
    w.add_eos_token_id(vocab["<|end_of_text|>"])
    w.add_add_bos_token(True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---- expected ids ----------------------------------------------------------------------------------------
def expected(path, corpus):
    tok = Tokenizer.from_file(path)
    cases = []
    specials = sorted(t.content for t in tok.get_added_tokens_decoder().values() if t.special)
    for text in corpus + random_strings(specials):
        plain = tok.encode(text, add_special_tokens=False).ids
        withsp = tok.encode(text, add_special_tokens=True).ids
        cases.append({
            "text": text,
            "ids": plain,
            "ids_special": withsp,
            "decoded": tok.decode(plain, skip_special_tokens=False),
            "decoded_skip": tok.decode(plain, skip_special_tokens=True),
        })
    return {"tokenizer": os.path.basename(path), "tokenizers_version": tokenizers.__version__,
            "cases": cases}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", help="SmolLM2-135M-Instruct GGUF (scripts/fetch-model.sh smollm2-135m)")
    args = ap.parse_args()
    corpus = load_corpus()
    write_json(os.path.join(HERE, "corpus.json"), corpus)
    outs = []
    if args.gguf:
        outs.append(make_smollm2(args.gguf))
    elif os.path.exists(os.path.join(HERE, "smollm2.tokenizer.json")):
        outs.append(os.path.join(HERE, "smollm2.tokenizer.json"))
    outs.extend(make_llama3ish())
    make_llama3ish_gguf()
    outs.extend(make_spm())
    os.makedirs(os.path.join(HERE, "expected"), exist_ok=True)
    for p in outs:
        name = os.path.basename(p).replace(".tokenizer.json", "")
        exp = expected(p, corpus)
        with open(os.path.join(HERE, "expected", name + ".json"), "w", encoding="utf-8") as f:
            head = {k: v for k, v in exp.items() if k != "cases"}
            f.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n')
            f.write(",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in exp["cases"]))
            f.write("\n]}\n")
        print("wrote", name)


if __name__ == "__main__":
    main()
