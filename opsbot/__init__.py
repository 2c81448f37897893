"""opsbot: incident response for SGLang prefill/decode disaggregated deployments."""

__version__ = "0.1.0"
