"""Host-only halves of firmware modules (CPython, tests, host tools): never
frozen into a board image nor deployed; the firmware reaches them only by
name through snake.platform.cold() on CPython."""
