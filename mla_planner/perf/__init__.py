"""Collectives, the decode step, prefill, request times and the seed article's metrics."""
