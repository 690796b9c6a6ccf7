"""The step kinds: a model request, a tool or output function call, a decision; each belongs to one agent run
(``AgentRun``) and reports to it. Internal to the durable package.
"""
