"""decorators of the airflow-pydantic-ai provider."""
