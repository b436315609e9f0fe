"""Binary byte units, so that memory figures read as the engines log them (GiB = 2**30 bytes)."""

GiB = 2**30
MiB = 2**20
