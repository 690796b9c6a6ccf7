"""What the ``airflow pydantic-ai cache`` commands and the UI view share: opening one task instance's cache
from its ids and rendering its steps (``access.py``), and the task instances' states from the metadata
DB (``task_states.py``)."""
