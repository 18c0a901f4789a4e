"""``WholeLines``: a stdio server's output handed on in whole lines, none past the limit."""

from __future__ import annotations

import anyio

from router.tools.mcp_stdio_lines import LineTooLong, WholeLines, held_lines


async def read(chunks: list[bytes], limit: int | None = None) -> tuple[list[str], int, str]:
    """What was read of ``chunks``, how many lines were cut, and why reading ended early."""
    send, receive = anyio.create_memory_object_stream[bytes](len(chunks))
    for chunk in chunks:
        send.send_nowait(chunk)
    send.close()
    cuts: list[int] = []
    got: list[str] = []

    def cut() -> None:
        cuts.append(1)

    if limit is None:
        stream = WholeLines(receive)
    else:
        with held_lines(limit, cut, lambda: None):
            stream = WholeLines(receive)
    ended = ""
    try:
        async for text in stream:
            got.append(text)
    except LineTooLong as exc:
        ended = str(exc)
    finally:
        await stream.aclose()
    return got, len(cuts), ended


def test_chunks_are_handed_on_up_to_their_last_line_end() -> None:
    chunks = [b'{"a"', b": 1}\n{", b'"b": 2}\n{"c": 3}\n{"d"', b": 4}\n", b"part"]

    got, cuts, ended = anyio.run(read, chunks)

    assert got == ['{"a": 1}\n', '{"b": 2}\n{"c": 3}\n', '{"d": 4}\n']
    assert (cuts, ended) == (0, "")


def test_a_character_split_between_chunks_is_decoded_whole() -> None:
    snowman = "☃".encode()

    got, _, _ = anyio.run(read, [b'"' + snowman[:1], snowman[1:] + b'"\n'])

    assert got == ['"☃"\n']


def test_a_line_past_the_limit_ends_the_reading_and_is_told() -> None:
    chunks = [b"x" * 6 + b"\n", b"y" * 6, b"y" * 6, b"z\n"]

    got, cuts, ended = anyio.run(read, chunks, 10)

    assert got == ["x" * 6 + "\n"]
    assert (cuts, ended) == (1, "a line longer than 10 characters")


def test_lines_within_the_limit_pass() -> None:
    got, cuts, _ = anyio.run(read, [b"x" * 9 + b"\n" + b"y" * 5, b"y" * 4 + b"\n"], 10)

    assert got == ["x" * 9 + "\n", "y" * 9 + "\n"]
    assert cuts == 0


def test_the_end_of_the_output_is_told() -> None:
    send, receive = anyio.create_memory_object_stream[bytes](1)
    send.send_nowait(b'{"a": 1}\n')
    send.close()
    ended: list[int] = []
    with held_lines(1024, lambda: None, lambda: ended.append(1)):
        stream = WholeLines(receive)

    async def drain() -> list[str]:
        try:
            return [text async for text in stream]
        finally:
            await stream.aclose()

    assert anyio.run(drain) == ['{"a": 1}\n']
    assert ended == [1]
