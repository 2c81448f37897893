"""See torchvision/__init__.py."""

from torchvision.transforms import InterpolationMode, __getattr__  # noqa: F401
