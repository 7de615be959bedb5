"""decode/target.py's topk_rows: the softmax's top-k of each row, a block of rows at a time, the
same bits as one softmax over all rows."""

import torch

from omnidraft.decode.target import ROWS, topk_rows


def test_topk_rows_in_blocks_equal_one_softmax_over_every_row():
    logits = torch.randn(3 * ROWS + 1, 5000, generator=torch.Generator().manual_seed(0)) * 4  # [n, V]
    for n in (0, 1, ROWS, 3 * ROWS + 1):
        ids, probs = topk_rows(logits[:n], 8)
        want = torch.topk(torch.softmax(logits[:n], dim=-1), 8, dim=-1)
        assert ids.shape == probs.shape == (n, 8)
        assert torch.equal(ids, want.indices) and torch.equal(probs, want.values)
