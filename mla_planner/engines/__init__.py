"""What vLLM and SGLang do: backends, memory accounting rules, layout limits, graphs, kernels."""
