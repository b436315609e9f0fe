"""Developer tools of mla-plan (run from the repository root)."""
