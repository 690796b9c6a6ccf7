"""The interception floor: how a pydantic-ai agent run reaches the steps (the capability, the model and
toolset wrappers, the approval loop, ``run_agent``). Internal to the durable package.
"""
