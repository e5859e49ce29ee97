"""A tiny GPT-2-style byte-level BPE tokenizer, trained here on a fixed text.

256 byte symbols + 3 control tokens + merges, total = the tiny models' vocab (320).
Ids 0..2 are <|endoftext|>, <|im_start|>, <|im_end|> (the SmolLM2 / Qwen layout).
"""
import json

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Plain text written for this script; only its letter-pair statistics matter.
_CORPUS = [
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun.",
    "A small model reads tokens, computes attention, and writes the next token.",
    "Hello world! This is a test of the tokenizer and of the inference engine.",
    "There are three things that the engine must get right: the norm, the rope and the matmul.",
    "In the beginning the weights were random, and the logits were random too.",
    "The capital of France is Paris. The capital of Italy is Rome.",
    "What is the capital of France? It is Paris, of course.",
    "1234567890 numbers, punctuation; quotes 'like this' and \"like that\".",
    "the the the then there these those this that than thin thing think",
]


def build(vocab_size: int = 320) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    return tok


def gguf_vocab(tok: Tokenizer):
    """(tokens, token_types, merges) as llama.cpp's converter writes them for a gpt2 vocab."""
    vocab = tok.get_vocab()
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    assert all(t is not None for t in tokens)
    types = [3 if t in SPECIALS else 1 for t in tokens]  # 3 = CONTROL, 1 = NORMAL
    model = json.loads(tok.to_str())["model"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, types, merges
