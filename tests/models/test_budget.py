"""The memory budget: sizes as people write them, and what it allows and refuses."""

import pytest

from omnidraft.errors import OmniDraftError
from omnidraft.models.budget import Budget, parse_size, rss_bytes


def test_sizes_read_as_mib_or_with_a_unit():
    assert parse_size("1500") == 1500 << 20
    assert parse_size("800M") == parse_size("800mb") == parse_size("800 MiB") == 800 << 20
    assert parse_size("3.5G") == parse_size("3.5gib") == int(3.5 * (1 << 30))


@pytest.mark.parametrize("bad", ["", "lots", "3.5T", "-1G", "0", "1e3"])
def test_a_size_that_is_not_one_is_a_one_line_error(bad):
    with pytest.raises(OmniDraftError, match="not a memory size") as err:
        parse_size(bad)
    assert "\n" not in str(err.value)


def test_the_budget_allows_what_fits_beside_this_process_and_names_what_does_not():
    held = rss_bytes()
    assert held > 0
    room = Budget(held + (64 << 20))
    assert room.allows(32 << 20) and not room.allows(128 << 20)
    assert Budget().allows(1 << 50)  # no budget
    room.require("the pair", "raise --max-memory")  # within it: nothing said
    with pytest.raises(OmniDraftError, match=r"the pair holds [\d.]+ GiB resident here, over the memory budget of "
                                             r"0\.00 GiB \(raise --max-memory\)"):
        Budget(1).require("the pair", "raise --max-memory")
    with pytest.raises(OmniDraftError, match="positive"):
        Budget(0)
