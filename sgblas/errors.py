"""Exceptions raised by the Pythonic layer (:func:`sgblas.gemm`, :class:`sgblas.Handle`).

:func:`sgblas.sgemm` never raises: it returns a :class:`~sgblas.Status`. The Pythonic layer turns
the same statuses into exceptions that carry the status and a sentence naming the bad value.
"""

from __future__ import annotations

from sgblas.enums import Status

__all__ = ["SgblasError", "InvalidValueError", "status_error"]


class SgblasError(RuntimeError):
    """An sgblas call failed; ``.status`` is the :class:`~sgblas.Status` it maps to."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = Status(status)


class InvalidValueError(SgblasError, ValueError):
    """An argument was invalid (``Status.INVALID_VALUE``)."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.INVALID_VALUE, message)


def status_error(status: Status, message: str) -> SgblasError:
    """The exception that matches ``status``: :class:`InvalidValueError` for INVALID_VALUE."""
    if status == Status.INVALID_VALUE:
        return InvalidValueError(message)
    return SgblasError(status, message)
