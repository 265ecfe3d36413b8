"""The first bytes of every KLR file (KLRFile's head ``d9 d9 f7``, also CBOR's self-described tag).

Its own module so that telling a KLR file from a BIR-JSON file imports nothing else of the format.
"""

MAGIC = b"\xd9\xd9\xf7"


def is_klr_bytes(head: bytes) -> bool:
    """Whether a file starting with ``head`` is a KLR file (by its magic bytes)."""
    return head.startswith(MAGIC)
