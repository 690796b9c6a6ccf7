"""The "Durable cache" view of the Airflow UI (an Airflow 3 plugin the provider registers)."""
