"""Drop-in for ``pyhf.pdf``: its model classes by pyhf's names, for scripts and libraries (such as
cabinetry) that name them in annotations or ``isinstance`` checks."""

from ._model import Model, _Config as _ModelConfig, _ConstraintModel, _MainModel

__all__ = ["Model", "_ModelConfig", "_MainModel", "_ConstraintModel"]
