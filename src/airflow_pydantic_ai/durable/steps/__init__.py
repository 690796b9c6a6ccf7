"""The steps floor: one attempt (``Attempt``) and the steps it hands out, with their counts, usage
ledger, writer, recorded output and clean-up. Internal to the durable package.
"""
