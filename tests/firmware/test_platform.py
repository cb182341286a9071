from snake import platform


def test_ticks_diff_wraps_like_micropython():
    t = platform.ticks_add(platform.TICKS_MASK, 5)
    assert platform.ticks_diff(t, platform.TICKS_MASK) == 5
    assert platform.ticks_diff(platform.TICKS_MASK, t) == -5


def test_ticks_add_negative():
    assert platform.ticks_diff(platform.ticks_add(10, -20), 10) == -20


def test_urandom_length_and_variety():
    a = platform.urandom(16)
    b = platform.urandom(16)
    assert len(a) == 16 and len(b) == 16
    assert a != b


def test_copy_into():
    dst = bytearray(8)
    platform.copy_into(dst, 2, b"abcdef", 1, 4)
    assert bytes(dst) == b"\x00\x00bcde\x00\x00"


def test_wall_ms_is_unix_milliseconds():
    # after 2020-01-01 and before 2100-01-01
    assert 1577836800000 < platform.wall_ms() < 4102444800000
