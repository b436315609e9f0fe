"""Errors, reading user files, units, where the built-in data lives."""
