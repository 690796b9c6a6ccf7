"""Shared helpers for the airflow-pydantic-ai test suite."""
