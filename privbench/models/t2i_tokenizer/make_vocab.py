"""Writes vocab.json and merges.txt of privbench's tiny CLIP tokenizer (run once; the files are package data).

CLIP's byte-level BPE needs the 256 byte symbols, each also with the end-of-word mark ``</w>``, and the two
special tokens; the merges build whole-word tokens for the words of privbench's captions (digit names, "a
picture of the digit ..."), left to right, so a caption is one token per word. Any other text still tokenizes
(byte by byte)."""
import json
import logging
from pathlib import Path


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's byte → printable-character table (the byte-level BPE's 256 base symbols)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))

WORDS = ("a an the of picture photo image drawing handwritten digit number class zero one two three four five six "
         "seven eight nine , .").split()


def build() -> tuple[dict, list[str]]:
    base = list(bytes_to_unicode().values())
    vocab_list = base + [b + "</w>" for b in base]
    merges = []
    for w in WORDS:
        sym = list(w[:-1]) + [w[-1] + "</w>"]
        while len(sym) > 1:
            pair = (sym[0], sym[1])
            merged = sym[0] + sym[1]
            if " ".join(pair) not in merges:
                merges.append(" ".join(pair))
                vocab_list.append(merged)
            sym = [merged] + sym[2:]
    vocab_list += ["<|startoftext|>", "<|endoftext|>"]
    seen: dict = {}
    for tok in vocab_list:
        seen.setdefault(tok, len(seen))
    return seen, merges


if __name__ == "__main__":
    here = Path(__file__).parent
    vocab, merges = build()
    (here / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (here / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger(__name__).info("%d tokens, %d merges", len(vocab), len(merges))
