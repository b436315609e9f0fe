"""Units shared by every model: binary byte units, so that memory figures read as the engines log them
(GiB = 2**30 bytes), and the activation element size."""

GiB = 2**30
MiB = 2**20
ACT_BYTES = 2   # bf16 activations (the DeepSeek/Kimi serving dtype)
