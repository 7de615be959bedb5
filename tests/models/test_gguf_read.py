"""Reading a GGUF (models/gguf_read.py): a user's own GGUF's tokenizer is the model's own,
written to the home once per file version, and the loaders' parsing shortcuts change nothing
they read."""

import os
import shutil

from omnidraft.models import catalog, gguf_read


def test_a_gguf_files_tokenizer_is_written_once_and_again_when_the_file_changes(tmp_path, monkeypatch, smollm_tok):
    """A user's own GGUF (a copy of the packaged SmolLM2's): a Session's first load writes its
    tokenizer to the home, later ones read that (a second where parsing Qwen's 151,936-token file
    took 27 s on an AVX2-only EPYC), and a changed file is read again."""
    from omnidraft.models.loading import load_tokenizer

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    path = tmp_path / "mine.gguf"
    shutil.copyfile(catalog.ensure_gguf("smollm2-135m"), path)
    written, real = [], gguf_read.write_tokenizer
    monkeypatch.setattr(gguf_read, "write_tokenizer", lambda gguf, dest: written.append(dest) or real(gguf, dest))
    text = "def f(x):\n    return x ** 2  # the square, 平方\n"
    for _ in range(2):  # the second load reads the written folder
        tok = load_tokenizer(str(path))
        assert tok(text).input_ids == smollm_tok(text).input_ids and tok.chat_template == smollm_tok.chat_template
    assert len(written) == 1 and written[0].parent == tmp_path / "home" / "tokenizers"
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the file replaced by another version
    load_tokenizer(str(path))
    assert len(written) == 2 and written[1] != written[0]
    assert sorted(p.name for p in written[0].parent.iterdir()) == sorted(p.name for p in written)


def test_conversion_parses_each_gguf_once_over_a_plain_array_and_builds_each_name_table_once(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "t.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_tensor("token_embd.weight", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with gguf_read.parsed_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first
        assert np.array_equal(first.tensors[0].data, real_reader(path).tensors[0].data)
        # sliced as a plain array (no memmap bookkeeping per slice), read-only as the memmap is
        assert type(first.data) is np.ndarray and not first.data.flags.writeable
        assert list(first.fields) == list(real_reader(path).fields)
        table = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is table
        assert table.get_name("model.embed_tokens") == "token_embd"
    assert (gguf.GGUFReader, gguf.get_tensor_name_map) == (real_reader, real_map)
