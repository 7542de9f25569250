"""gpu-policy-webhook: GPU request policy for clusters that share NVIDIA GPUs."""

__version__ = "0.1.0"
