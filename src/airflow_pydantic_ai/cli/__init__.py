"""The ``airflow pydantic-ai`` commands (and the ``airflow-pydantic-ai`` console script)."""
