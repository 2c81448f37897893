"""Kernel tests run on the CPU through Triton's interpreter unless a GPU is there (device tests)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
