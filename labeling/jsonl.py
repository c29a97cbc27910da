"""Writing JSON Lines: one compact JSON document per line, non-ASCII kept readable."""

import json
from collections.abc import Iterable, Iterator
from typing import Any, Protocol


class TextSink(Protocol):
    """Anything with ``write(str)``: a text file, ``sys.stdout`` or Django's OutputWrapper."""

    def write(self, text: str, /) -> object: ...


def jsonl_lines(records: Iterable[dict[str, Any]]) -> Iterator[str]:
    """Each record as one line, newline included; also used for streaming responses."""
    for record in records:
        yield json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def jsonl_write(records: Iterable[dict[str, Any]], out: TextSink) -> int:
    """Write each record as one line; return how many were written."""
    count = 0
    for line in jsonl_lines(records):
        out.write(line)
        count += 1
    return count
