"""The keys floor: canonical JSON, request and tool-call fingerprints, the key chain, what-changed diffs.

A step's key is the digest of its content; nothing here does I/O. Internal to the durable package.
"""
