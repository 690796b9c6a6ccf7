"""operators of the airflow-pydantic-ai provider."""
