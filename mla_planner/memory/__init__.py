"""Per-GPU memory and the KV pool as the engine counts it; verdicts and ways out."""
