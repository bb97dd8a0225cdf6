"""kernelkit: GPU kernel comparisons that can be rerun, checked and defended."""

import hashlib

__version__ = "0.1.0"


class KitError(Exception):
    """A problem the user can fix, reported as one sentence and a non-zero exit."""


def sha256_text(text: str) -> str:
    """The SHA-256 of a text: here, below every module, so spec can hash without the record formats."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
