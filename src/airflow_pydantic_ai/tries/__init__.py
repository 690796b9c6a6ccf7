"""The Airflow side of a durable try: the task's settings read once (``settings.py``), which try is running
(``which_try.py``), what a clear does with the cache (``clear_policy.py``), replay modes and fixtures
(``modes.py``), starting and ending the attempt (``lifecycle.py``), and publishing its report
(``report.py``: XCom; ``metrics.py``: Airflow's ``Stats``).

The engine (``airflow_pydantic_ai.durable``) knows nothing of Airflow; these modules hand it plain values.
"""
