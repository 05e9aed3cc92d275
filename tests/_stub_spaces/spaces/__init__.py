"""A stand-in for Hugging Face's `spaces` package (tests only): records GPU(duration=...) and marks the function."""

CALLS = []


def GPU(duration=60):  # noqa: N802 - the real package's name
    CALLS.append(duration)

    def deco(fn):
        fn.__wrapped_by_stub__ = True
        return fn

    return deco
