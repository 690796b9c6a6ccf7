"""hooks of the airflow-pydantic-ai provider."""
