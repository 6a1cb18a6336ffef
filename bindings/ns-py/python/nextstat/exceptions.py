"""pyhf's exception names (``pyhf.exceptions``), so that ``except pyhf.exceptions.X`` works with
``import nextstat as pyhf``. Each is a :class:`nextstat.InvalidInputError` (a ``ValueError``),
so nextstat's own ``except`` clauses catch them too; ``FailedMinimization`` is a
:class:`nextstat.ComputationError`."""

from ._core import ComputationError, InvalidInputError

__all__ = [
    "Unsupported", "InvalidMeasurement", "InvalidNameReuse", "InvalidSpecification",
    "InvalidPatchSet", "InvalidPatchLookup", "PatchSetVerificationError",
    "InvalidWorkspaceOperation", "UnspecifiedPOI", "InvalidModel", "InvalidModifier",
    "InvalidInterpCode", "InvalidTestStatistic", "InvalidBackend", "InvalidOptimizer",
    "InvalidPdfParameters", "InvalidPdfData", "FailedMinimization", "InvalidArchiveHost",
    "InvalidArchive",
]


class Unsupported(InvalidInputError):
    """A feature or argument pyhf has and nextstat deliberately does not (the message says what
    to use instead)."""


class InvalidMeasurement(InvalidInputError):
    """No such measurement in the workspace."""


class InvalidNameReuse(InvalidInputError):
    """A name used for two different things."""


class InvalidSpecification(InvalidInputError):
    """A document that is not a valid workspace, model or patchset."""

    def __init__(self, message="", schema=None):
        super().__init__(message)
        self.schema = schema


class InvalidPatchSet(InvalidInputError):
    """A patchset whose patches are inconsistent."""


class InvalidPatchLookup(InvalidInputError):
    """No patch with that name or values."""


class PatchSetVerificationError(InvalidInputError):
    """The patchset was made for another background-only workspace."""


class InvalidWorkspaceOperation(InvalidInputError):
    """A prune, rename or combine that cannot be done."""


class UnspecifiedPOI(InvalidInputError):
    """A calculation that needs a parameter of interest on a model without one."""


class InvalidModel(InvalidInputError):
    """A model that cannot be built or used as asked."""


class InvalidModifier(InvalidInputError):
    """An unknown or malformed modifier."""


class InvalidInterpCode(InvalidInputError):
    """An interpolation code the modifier type does not have."""


class InvalidTestStatistic(InvalidInputError):
    """A test statistic other than q0, q and qtilde."""


class InvalidBackend(InvalidInputError):
    """A tensor backend other than numpy."""


class InvalidOptimizer(InvalidInputError):
    """An optimizer nextstat does not run (it has its own L-BFGS-B)."""


class InvalidPdfParameters(InvalidInputError):
    """Parameters of the wrong length or kind."""


class InvalidPdfData(InvalidInputError):
    """Data of the wrong length or kind."""


class FailedMinimization(ComputationError):
    """A fit that did not converge."""

    def __init__(self, result=None):
        message = getattr(result, "message", None) or "the fit did not converge"
        super().__init__(message)
        self.result = result


class InvalidArchiveHost(InvalidInputError):
    """``contrib.utils.download`` from a host other than HEPData's without ``force=True``."""


class InvalidArchive(InvalidInputError):
    """``contrib.utils.download``: the URL answered with an error, or not with a tar or zip
    archive that unpacks inside its folder."""
