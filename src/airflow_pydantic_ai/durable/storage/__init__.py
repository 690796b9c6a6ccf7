"""The storage floor: the entry format, the store, the prefix layout and the read side.

Knows nothing of pydantic-ai: entries are bytes with a checksum and a schema version, written one object
per step under a task instance's prefix. Internal: the durable package's face re-exports what others use.
"""
