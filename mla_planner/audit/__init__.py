"""A user's own command (lint) and an engine's log (check-log) held against the plan."""
