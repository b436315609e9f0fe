"""Attention kinds and their KV-cache groups: the one seam every model of attention goes through."""
