"""See torchvision/__init__.py: names SGLang binds at import, nothing more."""

import enum


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    LANCZOS = "lanczos"
    NEAREST_EXACT = "nearest-exact"
    BOX = "box"
    HAMMING = "hamming"


def __getattr__(name):
    return type(name, (), {})
