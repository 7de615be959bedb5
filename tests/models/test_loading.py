"""models/loading.py's tokenizers: loaded without the Python copy of the vocabulary and merges
transformers keeps after building the Rust tokenizer, and still the same tokenizer."""

from omnidraft.models import catalog


def test_a_tokenizer_holds_no_python_copy_of_its_vocabulary_and_still_tokenizes_the_same(qwen_tok, gemma_tok):
    import tokenizers

    text = "def add(a, b):\n    return a + b  # ünïcode, 数字 123\n"
    for tok, name in ((qwen_tok, "qwen2.5-coder-0.5b"), (gemma_tok, "gemma3-270m")):
        assert "_vocab" not in vars(tok) and "_merges" not in vars(tok)
        raw = tokenizers.Tokenizer.from_file(str(catalog.tokenizer_dir(name) / "tokenizer.json"))
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert ids == raw.encode(text, add_special_tokens=False).ids
        assert tok.decode(ids) == text
        assert tok.get_vocab() == raw.get_vocab(with_added_tokens=True)
    chat = qwen_tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert chat.startswith("<|im_start|>system") and "<|im_start|>user\nhi<|im_end|>" in chat
