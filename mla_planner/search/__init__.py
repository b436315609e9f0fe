"""Layouts, knob tuning, bounds, ranking, the Pareto front and the plan file."""
