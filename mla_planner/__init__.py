"""mla-plan: plan, launch and verify MLA model deployments (DeepSeek-V2/V3/R1, Kimi-K2)."""

__version__ = "0.1.0"
