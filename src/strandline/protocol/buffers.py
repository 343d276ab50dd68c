"""The byte buffers the hot path passes around without copying them: a frame read off a socket
(``bytes`` or the ``bytearray`` it was read into), or a ``memoryview`` of part of one (the records
of a Produce request, a batch of a Fetch answer). Spelled out for the compiled hot path
(:mod:`strandline.speedups`), which checks each argument against its annotation."""

from typing import Union

Buffer = Union[bytes, bytearray, memoryview]
