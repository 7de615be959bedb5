"""device/xnnpack_options.py: XNNPACK's runtime options set through ExecuTorch's own set_option,
each read back, and a wrong value refused rather than claimed."""

from omnidraft.device.xnnpack_options import set_options, weight_cache


def test_the_weight_cache_is_on_and_reads_back_and_a_wrong_type_is_refused():
    assert weight_cache(True) and weight_cache(False)
    assert set_options(weight_cache_enabled=True) and weight_cache(False)
    assert not set_options(weight_cache_enabled=5)  # the runtime wants a bool: refused, not claimed
