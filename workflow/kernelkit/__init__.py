"""kernelkit: GPU kernel comparisons that can be rerun, checked and defended."""

__version__ = "0.1.0"


class KitError(Exception):
    """A problem the user can fix, reported as one sentence and a non-zero exit."""
