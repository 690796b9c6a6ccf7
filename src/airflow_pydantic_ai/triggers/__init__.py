"""Triggers that wait in Airflow's triggerer, holding no worker slot (the provider's ``triggers:`` entry)."""
