"""What an attempt counts and reports: the one count, the summary, the report, telemetry, usage, cost, budget."""
